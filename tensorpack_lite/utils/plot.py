"""The plot tool: the training curves of one or more log directories (their ``stats.json``) in one figure.

Command line (writes ``train_log/lr-1e-3/stats.png``, next to the first log directory, unless
``--output`` says otherwise)::

    python -m tensorpack_lite.utils.plot train_log/lr-1e-3 train_log/lr-1e-4
    python -m tensorpack_lite.utils.plot LOGDIR --keys 'error|accuracy' --smooth 3 --logy --output curves.png
    python -m tensorpack_lite.utils.plot LOGDIR --x global_step

From Python (nothing is shown; the figure is not registered with pyplot)::

    fig = plot_runs(['train_log/lr-1e-3', 'train_log/lr-1e-4'], keys='error', smooth=3)
    fig.savefig('errors.png')

How the figure is made:

* Quantities. A statistic named ``SPLIT<sep>NAME`` or ``NAME<sep>SPLIT``, where SPLIT is one of
  :data:`SPLITS` (``train``, ``val``, ``validation``, ``test``; any case) and ``<sep>`` one of
  ``_ - / .``, is the SPLIT curve of the quantity NAME: ``validation_error``, ``train-error`` and
  ``error_val`` are all curves of ``error``. Any other statistic (``cost``, ``learning_rate``) is
  a quantity of its own, and counts as the ``train`` curve when its quantity has other splits
  (``cost`` beside ``validation_cost``). See :func:`split_key`.
* Panels and lines. One panel per quantity, titled with it; one line per (run, split). A run's
  lines share a color, a split's lines a line style. The legend names the run (the last
  component of its directory, or as many trailing components as it takes to tell the runs
  apart) and, in a panel where a statistic names its split, the split.
* The x axis. ``epoch_num`` (default) or ``global_step``. A run's value at each x is the one of
  the last record holding it, so an epoch shows its end-of-epoch record rather than the records
  written mid-epoch, and a resumed run's repeated epochs show the latest values. Ticks are
  integers.
* ``--smooth N``: a trailing moving average over N points (each point is the mean of itself and
  the N-1 points before it; the first points average the ones that exist). ``--logy``: a
  logarithmic y axis. ``--keys REGEX``: only the statistics whose name the regular expression
  matches (``re.search``).

Needs matplotlib (``pip install matplotlib``, part of the ``examples`` extra). Drawing uses the
off-screen Agg canvas, so no display is needed. Neither this module nor ``python -m`` of it imports
TensorFlow (the package loads its TensorFlow part on first use).
"""

import argparse
import collections
import os
import re

import numpy as np

from . import stats_json
from .argtools import is_int, is_real
from .develop import import_optional
from .stats_json import X_KEYS

__all__ = ['SPLITS', 'split_key', 'load_stats', 'run_names', 'moving_average', 'plot_runs', 'main']

SPLITS = ('train', 'val', 'validation', 'test')
"""The split names recognized in statistic names, in the order their lines are drawn."""

_SPLIT_WORDS = '|'.join(sorted(SPLITS, key=len, reverse=True))     # 'validation' before 'val'
_SPLIT_FIRST = re.compile(r'(?P<split>{})[-_/.](?P<quantity>.+)'.format(_SPLIT_WORDS), re.IGNORECASE)
_SPLIT_LAST = re.compile(r'(?P<quantity>.+)[-_/.](?P<split>{})'.format(_SPLIT_WORDS), re.IGNORECASE)

_LINE_STYLES = {'train': '-', 'val': '--', 'validation': '--', 'test': ':'}


def split_key(key):
    """The (quantity, split) of the statistic ``key``; split is None when the name has no split.

    Example::

        split_key('validation_error')   # ('error', 'validation')
        split_key('train-error-top1')   # ('error-top1', 'train')
        split_key('cost')               # ('cost', None)
    """
    match = _SPLIT_FIRST.fullmatch(key) or _SPLIT_LAST.fullmatch(key)
    if match is None:
        return key, None
    return match.group('quantity'), match.group('split').lower()


def load_stats(logdir):
    """The records of ``logdir``'s stats.json: a non-empty list of dicts.

    Raises:
        FileNotFoundError: naming the directory or the file, when either does not exist.
        ValueError: naming the file, when it is not JSON, is empty or holds a record that is not
            an object.
        OSError: when the file cannot be read (the error names it).
    """
    fname = stats_json.stats_path(logdir)
    if not os.path.isdir(logdir):
        raise FileNotFoundError("Log directory '{}' does not exist.".format(logdir))
    records = stats_json.load_records(logdir)
    if records is None:
        raise FileNotFoundError("'{}' does not exist or is not a file (the JSONWriter monitor, one of "
                                "the default monitors, writes it).".format(fname))
    if not records:
        raise ValueError("'{}' holds no records yet.".format(fname))
    for index, record in enumerate(records):
        if not isinstance(record, dict):
            raise ValueError("Record {} of '{}' should be a JSON object, got {!r}".format(
                index, fname, record))
    return records


def run_names(logdirs):
    """Legend names of the runs in ``logdirs``: for each, the fewest trailing path components that
    no other run ends with (``seed1``, or ``a/seed1`` and ``b/seed1``). A directory given twice
    is numbered (``#1``, ``#2``)."""
    parts = [os.path.abspath(d).split(os.sep) for d in logdirs]
    names = []
    for index, path in enumerate(parts):
        others = parts[:index] + parts[index + 1:]
        depth = next((k for k in range(1, len(path) + 1)
                      if all(other[-k:] != path[-k:] for other in others)), None)
        if depth is None:
            names.append('{} #{}'.format('/'.join(path), 1 + parts[:index].count(path)))
        else:
            names.append('/'.join(path[-depth:]))
    return names


def moving_average(values, window):
    """The trailing moving average of ``values`` over ``window`` points, as float64: point i is
    the mean of points max(0, i - window + 1) to i."""
    values = np.asarray(values, dtype=np.float64)
    cumulative = np.concatenate([[0.0], np.cumsum(values)])
    end = np.arange(1, len(values) + 1)
    start = np.maximum(end - window, 0)
    return (cumulative[end] - cumulative[start]) / (end - start)


def _curve(records, key, x):
    """(xs, ys) of ``key`` in ``records``: at each x, the value of the last record holding it."""
    points = {}
    for record in records:
        if is_real(record.get(x)) and is_real(record.get(key)):
            points[record[x]] = record[key]
    xs = sorted(points)
    return xs, [points[value] for value in xs]


def _numeric_keys(runs):
    """The statistics (numeric, other than :data:`X_KEYS`) of all runs, in order of first appearance."""
    keys = collections.OrderedDict()
    for _, records in runs:
        for record in records:
            keys.update((k, None) for k, v in record.items() if k not in X_KEYS and is_real(v))
    return list(keys)


def _group_quantities(keys):
    """{quantity: [key, ...]}: quantities in the order of ``keys``, their keys in the order of
    :data:`SPLITS` (a key without a split counts as 'train')."""
    quantities = collections.OrderedDict()
    for key in keys:
        quantities.setdefault(split_key(key)[0], []).append(key)
    for quantity_keys in quantities.values():
        quantity_keys.sort(key=lambda k: SPLITS.index(split_key(k)[1] or 'train'))
    return quantities


def _compile_keys(keys):
    if keys is None or isinstance(keys, re.Pattern):
        return keys
    try:
        return re.compile(keys)
    except re.error as err:
        raise ValueError("keys: {!r} is not a valid regular expression ({})".format(keys, err)) from err


def _check_arguments(x, smooth):
    if x not in X_KEYS:
        raise ValueError("x must be one of {}, got {!r}".format(', '.join(X_KEYS), x))
    if not is_int(smooth) or smooth < 1:
        raise ValueError("smooth must be a positive number of points (1: no smoothing), got {!r}".format(
            smooth))


def plot_runs(logdirs, keys=None, smooth=1, logy=False, x='epoch_num'):
    """Draw the statistics of the runs in ``logdirs``: one panel per quantity, one line per
    (run, split). See the module's docstring for the rules.

    Args:
        logdirs (str or list[str]): log directories, each holding a stats.json.
        keys (str): a regular expression; only the statistics it matches (``re.search``) are drawn.
            Default: every numeric statistic.
        smooth (int): draw the trailing moving average over this many points (1: the raw values).
        logy (bool): use a logarithmic y axis.
        x (str): 'epoch_num' or 'global_step'.

    Returns:
        matplotlib.figure.Figure: the figure, with constrained layout; save it with ``savefig``.

    Example::

        fig = plot_runs(['train_log/a', 'train_log/b'], keys='^(validation_)?error$', logy=True)
    """
    if isinstance(logdirs, (str, os.PathLike)):
        logdirs = [logdirs]
    logdirs = [os.fspath(d) for d in logdirs]
    if not logdirs:
        raise ValueError("plot_runs() needs at least one log directory.")
    _check_arguments(x, smooth)
    key_filter = _compile_keys(keys)
    runs = list(zip(run_names(logdirs), [load_stats(d) for d in logdirs]))
    available = _numeric_keys(runs)
    quantities = _group_quantities([k for k in available if key_filter is None or key_filter.search(k)])
    if not quantities:
        files = ', '.join("'{}'".format(stats_json.stats_path(d)) for d in logdirs)
        raise ValueError("No numeric statistic {}in {}; available: {}".format(
            "matches keys={!r} ".format(keys) if keys is not None else '', files,
            ', '.join(available) or 'none'))

    figure_module = import_optional('matplotlib.figure', extra='examples', purpose='The plot tool')
    ticker = import_optional('matplotlib.ticker', extra='examples', purpose='The plot tool')
    columns = min(len(quantities), 3)
    rows = -(-len(quantities) // columns)
    fig = figure_module.Figure(figsize=(5.0 * columns, 3.4 * rows), dpi=100, layout='constrained')
    colors = ['C{}'.format(index % 10) for index in range(len(runs))]
    for index, (quantity, quantity_keys) in enumerate(quantities.items()):
        ax = fig.add_subplot(rows, columns, index + 1)
        _draw_panel(ax, quantity, quantity_keys, runs, colors, x, smooth)
        ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
        if logy:
            ax.set_yscale('log')
    return fig


def _draw_panel(ax, quantity, keys, runs, colors, x, smooth):
    """One quantity's panel: a line per (run, key) that has points."""
    names_splits = any(split_key(k)[1] is not None for k in keys)
    for (name, records), color in zip(runs, colors):
        for key in keys:
            xs, ys = _curve(records, key, x)
            if not xs:
                continue
            split = split_key(key)[1] or 'train'
            label = '{} {}'.format(name, split) if names_splits else name
            if smooth > 1:
                ys = moving_average(ys, smooth)
            ax.plot(xs, ys, color=color, linestyle=_LINE_STYLES[split], label=label,
                    marker='.' if len(xs) <= 40 else None)
    ax.set_title(quantity)
    ax.set_xlabel(x)
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(fontsize='small')


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError("should be a positive number of points, got {!r}".format(text))
    return value


def main(argv=None):
    """The command line; writes the figure and returns the path of the file written."""
    parser = argparse.ArgumentParser(
        prog='python -m tensorpack_lite.utils.plot',
        description="Draw the training curves of one or more log directories' stats.json in one image: "
                    "a panel per quantity (train/val/validation/test curves of a quantity together), "
                    "a line per run and split.")
    parser.add_argument('logdirs', nargs='+', metavar='LOGDIR', help="a log directory holding stats.json")
    parser.add_argument('--output', '-o', metavar='FILE',
                        help="the image to write (default: stats.png in the first LOGDIR)")
    parser.add_argument('--keys', metavar='REGEX',
                        help="draw only the statistics whose name matches this regular expression")
    parser.add_argument('--smooth', type=_positive_int, default=1, metavar='N',
                        help="draw the trailing moving average over N points (default 1: raw values)")
    parser.add_argument('--logy', action='store_true', help="logarithmic y axes")
    parser.add_argument('--x', choices=X_KEYS, default='epoch_num', help="the x axis (default: epoch_num)")
    args = parser.parse_args(argv)
    output = args.output or os.path.join(args.logdirs[0], 'stats.png')
    try:
        fig = plot_runs(args.logdirs, keys=args.keys, smooth=args.smooth, logy=args.logy, x=args.x)
        fig.savefig(output)
    except (OSError, ValueError, ImportError) as err:
        parser.error(str(err))
    print(output)
    return output


if __name__ == '__main__':
    main()
