"""Draw the training curves recorded in a log directory's ``stats.json`` to a PNG file.

Command line::

    python -m tensorpack_lite.utils.plot train_log/mnist-convnet
    python -m tensorpack_lite.utils.plot LOGDIR --out curves.png --keys train-error,val-error --x global_step

One subplot per statistic, against ``epoch_num`` (or ``global_step``). Needs matplotlib
(``pip install matplotlib``); it is drawn off-screen, no display is used.
"""

import argparse
import numbers
import os

from . import stats_json
from .stats_json import X_KEYS

__all__ = ['X_KEYS', 'load_stats', 'stat_keys', 'plot_stats', 'main']


def load_stats(logdir):
    """The list of records of ``logdir/stats.json`` (see :class:`JSONWriter`).

    Raises:
        FileNotFoundError: naming the file, when it does not exist.
        ValueError: naming the file, when it is not a JSON list.
    """
    stats = stats_json.load_records(logdir)
    if stats is None:
        raise FileNotFoundError("No statistics to plot: '{}' does not exist (it is written by the "
                                "JSONWriter monitor, one of the default monitors).".format(
                                    stats_json.stats_path(logdir)))
    return stats


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def stat_keys(stats):
    """The keys with numeric values in ``stats`` (other than :data:`X_KEYS`), in order of
    first appearance."""
    keys = {}
    for record in stats:
        for key, value in record.items():
            if key not in X_KEYS and _is_number(value):
                keys.setdefault(key, None)
    return list(keys)


def _import_matplotlib():
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("Plotting needs matplotlib: pip install matplotlib "
                          "(or pip install tensorpack_lite[examples])") from err
    return Figure


def plot_stats(stats, keys=None, x='epoch_num', out=None, title=None):
    """Draw one subplot per statistic, in one column.

    Args:
        stats (list[dict]): records as in stats.json.
        keys (list[str]): the statistics to draw; default: every numeric one.
        x (str): 'epoch_num' or 'global_step'.
        out (str): write the figure to this PNG file.
        title (str): the figure's title.

    Returns:
        matplotlib.figure.Figure: the figure (drawn with the Agg canvas; pyplot is not used).

    Example::

        fig = plot_stats(load_stats('train_log/run'), keys=['val-error'], out='val.png')
    """
    if x not in X_KEYS:
        raise ValueError("plot_stats(): x must be one of {}, got {!r}".format(X_KEYS, x))
    available = stat_keys(stats)
    if keys is None:
        keys = available
    unknown = [k for k in keys if k not in available]
    if unknown:
        raise ValueError("No numeric statistic named {} in the records; available: {}".format(
            ', '.join(repr(k) for k in unknown), ', '.join(available) or 'none'))
    if not keys:
        raise ValueError("The records hold no numeric statistic to plot.")

    Figure = _import_matplotlib()
    fig = Figure(figsize=(8, 0.4 + 2.2 * len(keys)), dpi=100)
    axes = fig.subplots(len(keys), 1, squeeze=False)[:, 0]
    for ax, key in zip(axes, keys):
        points = [(r[x], r[key]) for r in stats if _is_number(r.get(x)) and _is_number(r.get(key))]
        ax.plot([p[0] for p in points], [p[1] for p in points], marker='.', linewidth=1)
        ax.set_ylabel(key)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel(x)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    if out is not None:
        fig.savefig(out, format='png')
    return fig


def main(argv=None):
    """The command line; returns the path of the written PNG."""
    parser = argparse.ArgumentParser(
        prog='python -m tensorpack_lite.utils.plot',
        description="Draw the curves of LOGDIR/stats.json to a PNG file, one subplot per statistic.")
    parser.add_argument('logdir', metavar='LOGDIR', help="a training log directory holding stats.json")
    parser.add_argument('--out', help="the PNG file to write (default: LOGDIR/stats.png)")
    parser.add_argument('--keys', help="comma-separated statistics to draw (default: all numeric ones)")
    parser.add_argument('--x', choices=X_KEYS, default='epoch_num', help="the x axis (default: epoch_num)")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(args.logdir, 'stats.png')
    keys = [k.strip() for k in args.keys.split(',') if k.strip()] if args.keys else None
    try:
        plot_stats(load_stats(args.logdir), keys=keys, x=args.x, out=out, title=args.logdir)
    except (OSError, ValueError, ImportError) as err:
        parser.error(str(err))
    print(out)
    return out


if __name__ == '__main__':
    main()
