"""The package's structure: every import (also inside functions) points down the layers listed in
docs/architecture.md, no file or package imports itself back, only compat imports TensorFlow,
DataFlow and utils need no TensorFlow, and importing the package leaves TensorFlow's mode alone
(Keras 3 still trains)."""

import ast
import importlib
import os
import re
import subprocess
import sys

import pytest
from helpers.package_modules import PACKAGE, import_source, module_files, parse_module
from helpers.paths import TESTS_DIR
from helpers.processes import run_python, subprocess_env, users_env

HERE = TESTS_DIR
REPO = os.path.dirname(HERE)
ARCHITECTURE = os.path.join(REPO, 'docs', 'architecture.md')

# Outside the layers: the TensorFlow import point (usable anywhere) and the top-level facade.
UNLAYERED = {PACKAGE + '.compat'}


def read_layers(text):
    """{package: layer number} from the numbered list under '## Layers' of architecture.md."""
    section = re.search(r'^## Layers\n(.*?)(?=^## |\Z)', text, re.M | re.S)
    assert section, "docs/architecture.md has no '## Layers' section"
    layers = {}
    for number, names in re.findall(r'^(\d+)\. (.+)$', section.group(1), re.M):
        for name in re.findall(r'`(\w+)`', names):
            assert PACKAGE + '.' + name not in layers, "{} is listed twice".format(name)
            layers[PACKAGE + '.' + name] = int(number)
    return layers


def imports_of(name, path, modules):
    """The modules of the package that ``name`` imports, anywhere in the file: ``from pkg import
    x`` counts as importing ``pkg.x`` when that is a module, else ``pkg``."""
    tree = parse_module(path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = import_source(name, path, node)
            targets = [source + '.' + alias.name if source + '.' + alias.name in modules else source
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules and '.' in target:
                target = target.rsplit('.', 1)[0]   # `import a.b.c` / a name of a module
            if target in modules and target != name:
                found.add(target)
    return found


def unit_of(module):
    """The package a module belongs to for layering: tensorpack_lite.<first part>."""
    return '.'.join(module.split('.')[:2])


def package_of(module, modules):
    """The directory (package) a module is in: itself for a package's __init__."""
    return module if modules[module].endswith('__init__.py') else module.rsplit('.', 1)[0]


def find_cycle(graph):
    """One cycle of ``graph`` ({node: set of nodes}) as a list, or None."""
    state = {}
    stack = []

    def visit(node):
        state[node] = 'open'
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 'open':
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        state[node] = 'done'
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


@pytest.fixture(scope='module')
def import_graph():
    modules = module_files()
    return modules, {name: imports_of(name, path, modules) for name, path in modules.items()}


@pytest.fixture(scope='module')
def layers():
    return read_layers(open(ARCHITECTURE, encoding='utf-8').read())


def layer_violations(graph, layers):
    """The imports that do not point to a lower layer, as 'importer -> imported' strings."""
    bad = []
    for importer, imported in sorted(graph.items()):
        if importer == PACKAGE or importer in UNLAYERED:
            continue
        for target in sorted(imported):
            if target in UNLAYERED or unit_of(target) == unit_of(importer):
                continue
            if target == PACKAGE or layers[unit_of(target)] >= layers[unit_of(importer)]:
                bad.append('{} -> {}'.format(importer, target))
    return bad


def test_every_package_has_a_layer(import_graph, layers):
    modules, _ = import_graph
    units = {unit_of(m) for m in modules if m != PACKAGE} - UNLAYERED
    assert units - set(layers) == set(), "packages missing from docs/architecture.md's layers"
    assert set(layers) - units == set(), "docs/architecture.md lists packages that do not exist"


def test_imports_point_down_the_layers(import_graph, layers):
    _, graph = import_graph
    assert layer_violations(graph, layers) == []


def test_no_import_cycle_between_files(import_graph):
    _, graph = import_graph
    assert find_cycle(graph) is None


def test_no_import_cycle_between_packages(import_graph):
    modules, graph = import_graph
    packages = {}
    for importer, imported in graph.items():
        source = package_of(importer, modules)
        for target in imported:
            target_package = package_of(target, modules)
            # a package's __init__ gathering its own submodules is not a dependency on itself
            if target_package != source and not target_package.startswith(source + '.'):
                packages.setdefault(source, set()).add(target_package)
    assert find_cycle(packages) is None


def test_the_checker_sees_violations_and_cycles(tmp_path):
    """The checks above fail on what they are meant to catch: an upward import hidden in a
    function, and a cycle through it."""
    layers = read_layers("## Layers\n1. `utils`\n2. `train`\n\n## Next\n3. `ignored`\n")
    assert layers == {PACKAGE + '.utils': 1, PACKAGE + '.train': 2}
    lower = tmp_path / 'lower.py'
    lower.write_text("def late():\n    from ..train.base import Trainer\n    return Trainer\n")
    modules = {PACKAGE + '.utils.lower': str(lower), PACKAGE + '.train.base': 'base.py',
               PACKAGE + '.utils': '__init__.py', PACKAGE + '.train': '__init__.py'}
    found = imports_of(PACKAGE + '.utils.lower', str(lower), modules)
    assert found == {PACKAGE + '.train.base'}
    graph = {PACKAGE + '.utils.lower': found, PACKAGE + '.train.base': {PACKAGE + '.utils.lower'}}
    assert layer_violations(graph, layers) == ['tensorpack_lite.utils.lower -> tensorpack_lite.train.base']
    assert find_cycle(graph) == [PACKAGE + '.train.base', PACKAGE + '.utils.lower', PACKAGE + '.train.base']


MOVED = {'utils.launch': 'cluster.launch', 'utils.cluster': 'cluster.config', 'utils.netns': 'cluster.netns',
         'utils.slurm': 'cluster.slurm', 'utils.mpi_rank': 'cluster.mpi_rank',
         'utils.preemption': 'cluster.preemption',
         'tfutils.collective': 'multiprocess.collective',
         'tfutils.preemption_vote': 'multiprocess.stop_vote',
         'tfutils.sync_statistics': 'multiprocess.sync_statistics',
         'tfutils.step_timeline': 'profiling.step_timeline', 'tfutils.flops': 'profiling.flops',
         'utils.peak_flops': 'profiling.peak_flops',
         'tfutils.hooked_session': 'session.hooked_session', 'tfutils.caller_thread': 'session.caller_thread',
         'tfutils.session_failure': 'session.failure',
         'tfutils.mixed_precision': 'precision.mixed_precision',
         'callbacks.monitor_group': 'callbacks.monitors.group',
         'callbacks.monitor_writers': 'callbacks.monitors.writers',
         'callbacks.monitor_services': 'callbacks.monitors.services',
         'callbacks.mlflow_monitor': 'callbacks.monitors.mlflow',
         'callbacks.wandb_monitor': 'callbacks.monitors.wandb'}
"""The modules that moved (paths under the package): old -> new. The processes and clusters went
from ``utils`` to ``cluster``, the multi-process runtime from ``tfutils`` to ``multiprocess``,
profiling from ``tfutils`` and ``utils`` to ``profiling``, the hooked session from ``tfutils`` to
``session``, mixed precision from ``tfutils`` to ``precision``, the monitors from ``callbacks`` to
``callbacks.monitors`` (the old paths that are public re-export: callbacks/test_monitors_import_paths.py)."""


def test_dataflow_utils_and_cluster_import_without_tensorflow():
    moved = {'{}.{}'.format(PACKAGE, old) for old in MOVED}
    modules = sorted(m for m in module_files()
                     if m.startswith((PACKAGE + '.dataflow', PACKAGE + '.utils', PACKAGE + '.cluster'))
                     and '.imgaug' not in m and m not in moved)   # imgaug needs OpenCV (Keras imports TF)
    out = run_python("import importlib\n"
                     "for name in {!r}:\n"
                     "    importlib.import_module(name)\n"
                     "print('tensorflow imported:', sys.modules['tensorflow'] is not None)\n".format(modules),
                     without_tensorflow=True)
    assert out.strip() == 'tensorflow imported: False'
    assert len(modules) > 30


def test_importing_the_package_leaves_eager_mode_and_keras_trains_then_tensorpack_trains():
    out = run_python(r'''
import numpy as np
import tensorpack_lite
from tensorpack_lite import BatchData, DataFromList, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.compat import tf
print('eager after import:', tf.executing_eagerly())

import keras
rng = np.random.RandomState(0)
x = rng.rand(32, 4).astype('float32')
y = (x.sum(1) > 2).astype('float32')
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation='sigmoid')])
model.compile(optimizer='sgd', loss='binary_crossentropy')
history = model.fit(x, y, epochs=2, batch_size=8, verbose=0)
print('keras epochs:', len(history.history['loss']))

from helpers.models import LineRegression   # tests/ is on the PYTHONPATH (helpers.subprocess_env)

trainer = SimpleTrainer()
model = LineRegression(dim=4, lr=0.1, lr_variable=False)
launch_train_with_config(TrainConfig(model=model, dataflow=BatchData(DataFromList(
    [[a, b] for a, b in zip(x, y)], shuffle=False), 8), max_epoch=2, callbacks=[], monitors=[]), trainer)
print('tensorpack steps:', trainer.global_step, 'eager after training:', tf.executing_eagerly())
''')
    assert 'eager after import: True' in out
    assert 'keras epochs: 2' in out
    assert 'tensorpack steps: 8 eager after training: False' in out


KERAS_MODULES = ('keras', 'tf_keras', 'tensorflow.keras', 'tensorflow.python.keras')


def keras_imports(path):
    """The Keras modules a file imports (``import keras``, ``from tensorflow import keras``...)."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding='utf-8').read(), path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module] + [node.module + '.' + alias.name for alias in node.names]
        else:
            continue
        found.update(n for n in names if any(n == k or n.startswith(k + '.') for k in KERAS_MODULES))
    return found


def test_only_contrib_keras_imports_keras(tmp_path):
    users = {name for name, path in module_files().items() if keras_imports(path)}
    assert users == {PACKAGE + '.contrib.keras'}
    probe = tmp_path / 'probe.py'
    probe.write_text("import tf_keras as k\nfrom tensorflow import keras\nimport numpy\n")
    assert keras_imports(str(probe)) == {'tf_keras', 'tensorflow.keras'}


def _names_tensorflow(name):
    return name == 'tensorflow' or name.startswith('tensorflow.')


def _called(call):
    """The name a call calls: ``f`` of ``f()`` and of ``module.f()``."""
    return getattr(call.func, 'attr', getattr(call.func, 'id', None))


def tensorflow_imports(path):
    """The TensorFlow modules a file imports, at the top or inside functions: ``import`` and
    ``from ... import`` statements, and ``importlib.import_module()`` / ``__import__()`` of a
    name that starts as a literal (``'tensorflow.' + name`` counts as ``'tensorflow.'``)."""
    found = set()
    for node in ast.walk(ast.parse(open(path, encoding='utf-8').read(), path)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and node.args and _called(node) in ('import_module', '__import__'):
            literal = node.args[0]
            while isinstance(literal, ast.BinOp):
                literal = literal.left
            is_text = isinstance(literal, ast.Constant) and isinstance(literal.value, str)
            names = [literal.value] if is_text else []
        else:
            continue
        found.update(n.rstrip('.') for n in names if _names_tensorflow(n))
    return found


@pytest.mark.quick
def test_only_compat_imports_tensorflow(tmp_path):
    """docs/architecture.md: compat is the single place TensorFlow is imported (its internal
    modules through ``compat.tf_internal``)."""
    users = {name: sorted(tensorflow_imports(path)) for name, path in module_files().items()
             if tensorflow_imports(path)}
    assert set(users) == {PACKAGE + '.compat'}, users
    probe = tmp_path / 'probe.py'
    probe.write_text("import importlib.util\nimport numpy\n\n\ndef late(name):\n"
                     "    from tensorflow.core.protobuf import config_pb2\n"
                     "    import tensorflow.compat.v1 as tfv1\n"
                     "    importlib.import_module('tensorflow.python.client.timeline')\n"
                     "    __import__('tensorflow.python.debug')\n"
                     "    importlib.util.find_spec('tensorflow')\n"
                     "    importlib.import_module(name)\n"
                     "    return importlib.import_module('tensorflow.' + name)\n")
    assert tensorflow_imports(str(probe)) == {'tensorflow.core.protobuf', 'tensorflow.compat.v1',
                                              'tensorflow.python.client.timeline', 'tensorflow.python.debug',
                                              'tensorflow'}


def test_importing_everything_of_the_core_loads_no_keras_2():
    # (TensorFlow itself loads Keras 3 when imported, as in a user's default environment;
    # tf_keras is loaded only by contrib.keras)
    out = run_python("import sys\nimport tensorpack_lite\n"
                     "from tensorpack_lite import *\n"
                     "import tensorpack_lite.train, tensorpack_lite.callbacks, tensorpack_lite.predict\n"
                     "print(sorted(m for m in sys.modules if m.split('.')[0] == 'tf_keras'))\n",
                     env=users_env())
    assert out.strip().splitlines()[-1] == '[]'


@pytest.mark.parametrize('package', ['utils', 'tfutils', 'callbacks'])
def test_the_old_paths_of_moved_modules_name_the_new_ones(package):
    """The old paths under ``package`` of the modules of MOVED (``tensorpack_lite.utils.launch`` &
    co., ``tensorpack_lite.tfutils.collective`` & co.): importing one fails with an ImportError
    naming the new module (without TensorFlow under utils, which needs none)."""
    moved = {PACKAGE + '.' + old: PACKAGE + '.' + new for old, new in MOVED.items()
             if old.startswith(package + '.')}
    out = run_python("import importlib\n"
                     "for old in {!r}:\n"
                     "    try:\n"
                     "        importlib.import_module(old)\n"
                     "    except ImportError as err:\n"
                     "        print(err)\n".format(sorted(moved)), without_tensorflow=package == 'utils')
    for old, new in sorted(moved.items()):
        assert "{} moved to {}: import it from there".format(old, new) in out, out
        importlib.import_module(new)


def test_running_the_old_launcher_names_the_new_one():
    """``python -m tensorpack_lite.utils.launch`` fails, saying how to run the new launcher."""
    argv = [sys.executable, '-m', 'tensorpack_lite.utils.launch', '--workers', '1', '--', 'true']
    run = subprocess.run(argv,
                         capture_output=True, text=True, timeout=300, cwd=HERE,
                         env=subprocess_env())
    assert run.returncode == 1 and "run it as `python -m tensorpack_lite.cluster.launch`" in run.stderr
