"""The monitors moved into ``tensorpack_lite.callbacks.monitors``; every public path to them still
works and gives the same objects: tensorpack's ``callbacks.monitor``, the documented
``callbacks.tracking`` and ``callbacks.hparams``, ``tensorpack_lite.callbacks`` and the top level.
(The old paths that were never public fail naming the new module: library/test_architecture.py.)"""

import ast
import glob
import importlib
import os

import pytest

import tensorpack_lite
from tensorpack_lite import callbacks
from tensorpack_lite.callbacks import monitors

pytestmark = pytest.mark.quick

OLD_PATHS = {
    'tensorpack_lite.callbacks.monitor': {
        'MonitorBase': 'group', 'NoOpMonitor': 'group', 'Monitors': 'group', 'TFEventWriter': 'writers',
        'JSONWriter': 'writers', 'ScalarPrinter': 'writers', 'SendMonitorData': 'services',
        'CometMLMonitor': 'services'},
    'tensorpack_lite.callbacks.tracking': {
        'run_parameters': 'tracking', 'run_outcome': 'tracking', 'last_checkpoint': 'tracking',
        'TrackerRecord': 'tracking', 'FINISHED': 'tracking', 'FAILED': 'tracking', 'KILLED': 'tracking'},
    'tensorpack_lite.callbacks.hparams': {'TensorBoardHParams': 'hparams'},
}
"""Each public old module: {name it exports: the module of ``callbacks.monitors`` that defines it}."""

MONITORS = ['MonitorBase', 'NoOpMonitor', 'Monitors', 'TFEventWriter', 'JSONWriter', 'ScalarPrinter',
            'SendMonitorData', 'CometMLMonitor', 'MLflowMonitor', 'WandbMonitor', 'TensorBoardHParams']
NOT_AT_THE_TOP = ['NoOpMonitor']
"""What ``from tensorpack_lite import *`` does not bind (tensorpack's did not either)."""


@pytest.mark.parametrize('old', sorted(OLD_PATHS))
def test_an_old_public_path_exports_the_same_objects_as_the_new_home(old):
    module = importlib.import_module(old)
    assert sorted(module.__all__) == sorted(OLD_PATHS[old])
    for name, home in OLD_PATHS[old].items():
        new = importlib.import_module('tensorpack_lite.callbacks.monitors.' + home)
        assert name in new.__all__, (home, name)
        assert getattr(module, name) is getattr(new, name), (old, name)


def test_every_monitor_is_the_same_object_from_the_package_callbacks_and_the_top_level():
    assert sorted(monitors.__all__) == sorted(MONITORS)
    for name in MONITORS:
        obj = getattr(monitors, name)
        assert obj.__module__.startswith('tensorpack_lite.callbacks.monitors.'), (name, obj.__module__)
        assert name in callbacks.__all__ and getattr(callbacks, name) is obj, name
        if name not in NOT_AT_THE_TOP:
            assert name in tensorpack_lite.__all__ and getattr(tensorpack_lite, name) is obj, name


def test_the_monitors_import_nothing_of_the_other_callbacks():
    """docs/architecture.md: the package needs nothing of the other callbacks (``from ..x`` in
    ``callbacks/monitors/`` would be ``callbacks.x``)."""
    files = glob.glob(os.path.join(os.path.dirname(monitors.__file__), '*.py'))
    assert len(files) == 8
    found = []
    for path in files:
        for node in ast.walk(ast.parse(open(path, encoding='utf-8').read(), path)):
            if isinstance(node, ast.ImportFrom) and (
                    node.level == 2 or (node.module or '').startswith('tensorpack_lite.callbacks')):
                found.append('{}: {}'.format(os.path.basename(path), ast.dump(node)))
    assert found == []
