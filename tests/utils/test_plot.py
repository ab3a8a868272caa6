"""utils.plot, the plot tool: quantities and splits, the figure's panels and lines, the command line."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tensorpack_lite.utils.plot import load_stats, main, moving_average, plot_runs, run_names, split_key
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

matplotlib = pytest.importorskip('matplotlib')

REPO = REPO_DIR
EPOCHS = [1, 2, 3, 4]
STEPS_PER_EPOCH = 5


def write_stats(logdir, records):
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, 'stats.json'), 'w') as f:
        json.dump(records, f)
    return logdir


def make_records(lr, with_val_accuracy=True):
    """Records of a made-up run: per epoch, one mid-epoch record (cost 50) and the end-of-epoch one."""
    records = []
    for epoch in EPOCHS:
        step = epoch * STEPS_PER_EPOCH
        records.append({'epoch_num': epoch, 'global_step': step - 2, 'cost': 50.0})
        end = {'epoch_num': epoch, 'global_step': step, 'cost': 1.0 / epoch + lr,
               'validation_cost': 1.5 / epoch + lr, 'train-error-top1': 0.5 / epoch,
               'val-error-top1': 0.6 / epoch, 'accuracy': 1 - 0.5 / epoch, 'learning_rate': lr,
               'note': 'not a number', 'flag': True}
        if with_val_accuracy:
            end['val_accuracy'] = 1 - 0.6 / epoch
        records.append(end)
    return records


@pytest.fixture
def two_runs(tmp_path):
    return [write_stats(str(tmp_path / 'a' / 'lr-0.1'), make_records(0.1)),
            write_stats(str(tmp_path / 'b' / 'lr-0.01'), make_records(0.01, with_val_accuracy=False))]


def line_data(ax):
    """{label: (xs, ys)} of the lines of ``ax``."""
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


@pytest.mark.parametrize('key, expected', [
    ('cost', ('cost', None)),
    ('validation_cost', ('cost', 'validation')),
    ('train-error-top1', ('error-top1', 'train')),
    ('val-error-top1', ('error-top1', 'val')),
    ('val_accuracy', ('accuracy', 'val')),
    ('error_test', ('error', 'test')),
    ('Train/loss', ('loss', 'train')),
    ('validation', ('validation', None)),             # a split word alone is a name
    ('valid_error', ('valid_error', None)),           # 'valid' is not a split
    ('QueueInput/queue_size', ('QueueInput/queue_size', None)),
])
def test_split_key(key, expected):
    assert split_key(key) == expected


def test_panels_lines_and_end_of_epoch_values(two_runs):
    fig = plot_runs(two_runs)
    assert [ax.get_title() for ax in fig.axes] == ['cost', 'error-top1', 'accuracy', 'learning_rate']
    assert all(ax.get_xlabel() == 'epoch_num' for ax in fig.axes)
    cost, error, accuracy, lr = fig.axes

    # Each epoch shows its end-of-epoch record, not the mid-epoch cost of 50.
    assert line_data(cost) == {
        'lr-0.1 train': (EPOCHS, [1.0 / e + 0.1 for e in EPOCHS]),
        'lr-0.1 validation': (EPOCHS, [1.5 / e + 0.1 for e in EPOCHS]),
        'lr-0.01 train': (EPOCHS, [1.0 / e + 0.01 for e in EPOCHS]),
        'lr-0.01 validation': (EPOCHS, [1.5 / e + 0.01 for e in EPOCHS]),
    }
    assert [line.get_label() for line in error.get_lines()] == [
        'lr-0.1 train', 'lr-0.1 val', 'lr-0.01 train', 'lr-0.01 val']
    assert line_data(error)['lr-0.01 val'] == (EPOCHS, [0.6 / e for e in EPOCHS])
    # The second run has no val_accuracy: no line for it.
    assert [line.get_label() for line in accuracy.get_lines()] == [
        'lr-0.1 train', 'lr-0.1 val', 'lr-0.01 train']
    # A panel without splits names the runs only.
    assert line_data(lr) == {'lr-0.1': (EPOCHS, [0.1] * 4), 'lr-0.01': (EPOCHS, [0.01] * 4)}

    # A run keeps its color, a split its line style; every panel has a legend.
    styles = {(line.get_color(), line.get_linestyle()) for line in cost.get_lines()}
    assert len({color for color, _ in styles}) == 2 and {style for _, style in styles} == {'-', '--'}
    assert all(ax.get_legend() is not None for ax in fig.axes)
    assert all(ax.get_yscale() == 'linear' for ax in fig.axes)


def test_integer_ticks_and_log_scale(two_runs):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    fig = plot_runs(two_runs, logy=True)
    FigureCanvasAgg(fig).draw()
    for ax in fig.axes:
        ticks = ax.get_xticks()
        assert len(ticks) >= 2 and np.array_equal(ticks, np.round(ticks)), (ax.get_title(), ticks)
        assert ax.get_yscale() == 'log'


def test_global_step_axis_keeps_mid_epoch_records(two_runs):
    fig = plot_runs(two_runs, keys='^cost$', x='global_step')
    assert len(fig.axes) == 1 and fig.axes[0].get_xlabel() == 'global_step'
    xs, ys = line_data(fig.axes[0])['lr-0.1']
    assert xs == [3, 5, 8, 10, 13, 15, 18, 20]
    assert ys == [v for e in EPOCHS for v in (50.0, 1.0 / e + 0.1)]


def test_smoothing_is_a_trailing_mean(two_runs):
    fig = plot_runs(two_runs, keys='^(validation_)?cost$', smooth=3)
    y = [1.0 / e + 0.1 for e in EPOCHS]
    expected = [y[0], (y[0] + y[1]) / 2, (y[0] + y[1] + y[2]) / 3, (y[1] + y[2] + y[3]) / 3]
    xs, ys = line_data(fig.axes[0])['lr-0.1 train']
    assert xs == EPOCHS
    np.testing.assert_allclose(ys, expected, rtol=1e-12)
    np.testing.assert_allclose(moving_average([4, 8, 0, 2, 10], 2), [4, 6, 4, 1, 6])
    np.testing.assert_allclose(moving_average([4, 8, 0], 1), [4, 8, 0])


def test_keys_filter(two_runs):
    fig = plot_runs(two_runs, keys='^val')
    assert [ax.get_title() for ax in fig.axes] == ['cost', 'error-top1', 'accuracy']
    assert [line.get_label() for line in fig.axes[2].get_lines()] == ['lr-0.1 val']
    with pytest.raises(ValueError, match=r"No numeric statistic matches keys='nope'.*"
                                         r"available: cost, validation_cost, train-error-top1"):
        plot_runs(two_runs, keys='nope')
    with pytest.raises(ValueError, match=r"keys: '\(' is not a valid regular expression"):
        plot_runs(two_runs, keys='(')


def test_bad_arguments(two_runs):
    with pytest.raises(ValueError, match="x must be one of epoch_num, global_step, got 'time'"):
        plot_runs(two_runs, x='time')
    with pytest.raises(ValueError, match='smooth must be a positive number of points.*got 0'):
        plot_runs(two_runs, smooth=0)
    with pytest.raises(ValueError, match='at least one log directory'):
        plot_runs([])


def test_run_names_are_told_apart(tmp_path):
    assert run_names(['/x/a/run', '/x/b/run', '/y/c']) == ['a/run', 'b/run', 'c']
    assert run_names(['/x/run', '/x/run/']) == ['/x/run #1', '/x/run #2']
    records = [{'epoch_num': 1, 'global_step': 2, 'cost': 3.0}]
    runs = [write_stats(str(tmp_path / d / 'run'), records) for d in ('seed1', 'seed2')]
    fig = plot_runs(runs)
    assert [line.get_label() for line in fig.axes[0].get_lines()] == ['seed1/run', 'seed2/run']


@pytest.mark.parametrize('content, message', [
    (None, "Log directory '{logdir}' does not exist"),
    (b'', "'{fname}' is not valid JSON"),
    (b'[]', "'{fname}' holds no records yet"),
    (b'\xff\xfe\x00garbage', "'{fname}' is not valid JSON"),
    (b'{"epoch_num": 1}', "'{fname}' should hold a list of records, got a dict"),
    (b'[{"epoch_num": 1}, 3]', "Record 1 of '{fname}' should be a JSON object, got 3"),
    (b'[{"epoch_num": 1, "global_step": 1, "tag": "x"}]', "No numeric statistic in '{fname}'"),
])
def test_bad_stats_files_name_the_file(tmp_path, content, message):
    logdir = str(tmp_path / 'run')
    fname = os.path.join(logdir, 'stats.json')
    if content is not None:
        os.makedirs(logdir)
        with open(fname, 'wb') as f:
            f.write(content)
    with pytest.raises((ValueError, OSError)) as info:
        plot_runs([logdir])
    assert message.format(logdir=logdir, fname=fname) in str(info.value)


def test_missing_stats_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="'{}' does not exist".format(tmp_path / 'stats.json')):
        load_stats(str(tmp_path))


def test_without_matplotlib(two_runs, monkeypatch):
    monkeypatch.setitem(sys.modules, 'matplotlib.figure', None)
    with pytest.raises(ImportError, match=r"'matplotlib'.*pip install matplotlib.*\[examples\]"):
        plot_runs(two_runs)


def test_command_line_overlays_several_runs(two_runs, tmp_path, capsys):
    from PIL import Image
    out = str(tmp_path / 'curves.png')
    assert main(two_runs + ['--output', out, '--smooth', '2', '--logy', '--keys', 'cost|error']) == out
    assert capsys.readouterr().out.strip() == out
    with Image.open(out) as img:     # two panels side by side, 5 x 3.4 inches each at 100 dpi
        assert img.format == 'PNG' and img.size == (1000, 340)

    assert main(two_runs[:1]) == os.path.join(two_runs[0], 'stats.png')
    with Image.open(os.path.join(two_runs[0], 'stats.png')) as img:     # 4 panels: 3 columns, 2 rows
        assert img.size == (1500, 680)


@pytest.mark.parametrize('args, message', [
    (['{missing}'], "Log directory '{missing}' does not exist"),
    (['{run}', '--smooth', '0'], "argument --smooth: should be a positive number of points, got '0'"),
    (['{run}', '--keys', 'nope'], "No numeric statistic matches keys='nope'"),
    (['{run}', '--x', 'time'], "argument --x: invalid choice: 'time'"),
])
def test_command_line_errors(two_runs, tmp_path, capsys, args, message):
    names = {'run': two_runs[0], 'missing': str(tmp_path / 'missing')}
    with pytest.raises(SystemExit) as info:
        main([a.format(**names) for a in args])
    assert info.value.code == 2
    assert message.format(**names) in capsys.readouterr().err


# Runs the tool as `python -m` would, then reports whether TensorFlow got imported.
_RUN_AS_MODULE = """
import runpy, sys
sys.argv = ['plot'] + sys.argv[1:]
runpy.run_module('tensorpack_lite.utils.plot', run_name='__main__', alter_sys=True)
print('tensorflow imported:', 'tensorflow' in sys.modules)
"""

# The same, with the parent package `tensorpack_lite` stood in for by an empty package (so its
# __init__, which imports TensorFlow, does not run): what the plot tool itself imports.
_RUN_WITHOUT_PACKAGE_INIT = """
import sys, types
package = types.ModuleType('tensorpack_lite')
package.__path__ = [{package_dir!r}]
sys.modules['tensorpack_lite'] = package
""" + _RUN_AS_MODULE


def _run_python(code, args):
    env = subprocess_env(TF_CPP_MIN_LOG_LEVEL='3')
    proc = subprocess.run([sys.executable, '-c', code] + args, capture_output=True, text=True,
                          timeout=120, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


def test_the_plot_tool_imports_no_tensorflow(two_runs, tmp_path):
    out = str(tmp_path / 'out.png')
    code = _RUN_WITHOUT_PACKAGE_INIT.format(package_dir=os.path.join(REPO, 'tensorpack_lite'))
    assert _run_python(code, two_runs + ['--output', out]) == [out, 'tensorflow imported: False']
    assert os.path.getsize(out) > 0


@pytest.fixture(scope='module')
def module_run(tmp_path_factory):
    """`python -m tensorpack_lite.utils.plot` on one run: (its output lines, the PNG path)."""
    tmp = tmp_path_factory.mktemp('module_run')
    run = write_stats(str(tmp / 'run'), make_records(0.1))
    out = str(tmp / 'out.png')
    return _run_python(_RUN_AS_MODULE, [run, '--output', out, '--x', 'global_step']), out


def test_python_m_writes_the_png(module_run):
    lines, out = module_run
    assert lines[0] == out and os.path.getsize(out) > 0


def test_python_m_imports_no_tensorflow(module_run):
    lines, _ = module_run
    assert lines[-1] == 'tensorflow imported: False'
