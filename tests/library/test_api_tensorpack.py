"""tensorpack 0.11's public names: each exists at the same place here (tensorpack -> tensorpack_lite),
or docs/differences.md says why it cannot; the package works without TensorFlow for what does not need it."""

import importlib
import os
import re

import pytest
from helpers.paths import TESTS_DIR, import_file
from helpers.processes import run_python

HERE = TESTS_DIR
# the packages' names (their __all__, computed on import), then every public module's (generated from
# tensorpack's source by tests/tools/gen_tensorpack_names.py)
NAMES_FILES = [os.path.join(HERE, 'tensorpack_0.11_names.tsv'),
               os.path.join(HERE, 'tensorpack_0.11_module_names.tsv')]
DIFFERENCES = os.path.join(HERE, '..', 'docs', 'differences.md')

# A line of docs/differences.md that accounts for a missing name: - `tensorpack.module.Name`: reason
_EXCUSE = re.compile(r'^- `(tensorpack(?:\.\w+)*)\.(\w+)`: (.{20,})$')


def _tensorpack_names(path=None):
    rows = []
    for name in [path] if path else NAMES_FILES:
        with open(name) as f:
            rows += [line.rstrip('\n').split('\t') for line in f if line.strip() and not line.startswith('#')]
    assert all(len(row) == 2 for row in rows)
    return rows


def _excused():
    with open(DIFFERENCES, encoding='utf-8') as f:
        return {(m.group(1), m.group(2)): m.group(3) for m in map(_EXCUSE.match, f.read().splitlines()) if m}


def _is_public(module_name, name):
    """Whether ``name`` is a public name of tensorpack_lite's counterpart of ``module_name``."""
    try:
        module = importlib.import_module('tensorpack_lite' + module_name[len('tensorpack'):])
    except ImportError:   # no such module (or it needs what is not installed)
        return False
    public = getattr(module, '__all__', None)
    return hasattr(module, name) and (public is None or name in public)


def test_the_list_is_tensorpacks_whole_public_api():
    rows = _tensorpack_names()
    assert len(rows) > 900 and len({name for _, name in rows}) > 340
    modules = {module for module, _ in rows}
    for expected in ('tensorpack', 'tensorpack.dataflow.imgaug', 'tensorpack.dataflow.dataset',
                     'tensorpack.callbacks', 'tensorpack.tfutils', 'tensorpack.utils.fs',
                     'tensorpack.tfutils.varmanip', 'tensorpack.tfutils.dependency',
                     'tensorpack.dataflow.imgaug.crop', 'tensorpack.callbacks.graph',
                     'tensorpack.utils.logger'):
        assert expected in modules
    assert len(_tensorpack_names(NAMES_FILES[1])) == len(set(map(tuple, _tensorpack_names(NAMES_FILES[1]))))
    assert ['tensorpack.utils.logger', 'warning'] in rows          # from a loop appending to __all__


def _generator():
    return import_file(os.path.join(HERE, 'tools', 'gen_tensorpack_names.py'), 'gen_tensorpack_names')


def test_the_generator_reads_every_form_of_all():
    sources = {
        'tensorpack/__init__.py': "__all__ = ['x']",
        'tensorpack/a/plain.py': "__all__ = ['A', 'B']\n__all__ += ['C']\n__all__.extend(['D'])\n"
                                 "__all__.append('E')\nA = B = C = D = E = 1",
        'tensorpack/a/loop.py': ("__all__ = ['f']\nNAMES = ['g', 'h']\n"
                                 "for k in NAMES:\n    __all__.append(k)\n"
                                 "for k in ['i']:\n    __all__.append(k)"),
        'tensorpack/a/branches.py': "try:\n    import zmq\nexcept ImportError:\n    __all__ = []\n"
                                    "else:\n    __all__ = ['send']",
        'tensorpack/a/no_all.py': "import os\nX = 1\ndef f(): pass\nclass K: pass\ndef _p(): pass",
        'tensorpack/a/thing_test.py': "__all__ = ['T']",
        'tensorpack/a/_private.py': "__all__ = ['P']",
        'tensorpack/libinfo.py': "__version__ = '0.11'\ndef v(): pass",
    }
    assert _generator().module_names(sources) == [
        ('tensorpack.a.branches', 'send'),
        ('tensorpack.a.loop', 'f'), ('tensorpack.a.loop', 'g'), ('tensorpack.a.loop', 'h'),
        ('tensorpack.a.loop', 'i'),
        ('tensorpack.a.no_all', 'K'), ('tensorpack.a.no_all', 'f'),
        ('tensorpack.a.plain', 'A'), ('tensorpack.a.plain', 'B'), ('tensorpack.a.plain', 'C'),
        ('tensorpack.a.plain', 'D'), ('tensorpack.a.plain', 'E')]


def test_every_tensorpack_name_exists_or_is_explained():
    excused = _excused()
    unexplained = []
    for module_name, name in _tensorpack_names():
        if not _is_public(module_name, name) and (module_name, name) not in excused:
            unexplained.append('{}.{}'.format(module_name, name))
    assert not unexplained, ("{} tensorpack 0.11 names are neither in tensorpack_lite nor explained in "
                             "docs/differences.md: {}".format(len(unexplained), ', '.join(unexplained)))


def test_explanations_are_only_for_names_that_are_missing():
    listed = set(map(tuple, _tensorpack_names()))
    for (module_name, name), reason in _excused().items():
        assert (module_name, name) in listed, "differences.md explains {}.{}, which is not a tensorpack " \
                                              "name".format(module_name, name)
        assert not _is_public(module_name, name), "differences.md says {}.{} is missing, but it " \
                                                  "exists".format(module_name, name)


def test_dataflow_and_utils_work_without_tensorflow():
    out = run_python(
        "import tensorpack_lite\n"
        "from tensorpack_lite import BatchData, DataFromList, MapDataComponent, logger\n"
        "from tensorpack_lite.utils.stats import RatioCounter\n"
        "df = BatchData(MapDataComponent(DataFromList([[i] for i in range(6)], shuffle=False),\n"
        "                                lambda x: x * 10, 0), 3)\n"
        "df.reset_state()\n"
        "print('batches', [b[0].tolist() for b in df])\n"
        "print('tensorflow imported:', sys.modules.get('tensorflow') is not None)\n",
        without_tensorflow=True, timeout=120)
    assert 'batches [[0, 10, 20], [30, 40, 50]]' in out
    assert 'tensorflow imported: False' in out


def test_augmentors_and_image_dataflows_work_without_tensorflow():
    out = run_python(
        "import numpy as np\n"
        "from tensorpack_lite import AugmentImageComponents, DataFromList, imgaug\n"
        "from tensorpack_lite.utils.utils import fix_rng_seed\n"
        "fix_rng_seed(7)\n"
        "image = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)\n"
        "df = AugmentImageComponents(DataFromList([[image, image.copy()]], shuffle=False),\n"
        "                            [imgaug.Flip(horiz=True), imgaug.ToFloat32()])\n"
        "df.reset_state()\n"
        "flipped = set()\n"
        "for _ in range(20):\n"
        "    first, second = next(iter(df))\n"
        "    assert (first == second).all() and first.dtype == np.float32 and first.shape == (4, 6, 3)\n"
        "    assert (first == image).all() or (first == image[:, ::-1]).all()\n"
        "    flipped.add(bool((first == image[:, ::-1]).all()))\n"
        "print('flipped:', sorted(flipped))\n"
        "print('tensorflow imported:', sys.modules.get('tensorflow') is not None)\n",
        without_tensorflow=True, timeout=120)
    assert 'flipped: [False, True]' in out      # both outcomes, each applied to both images alike
    assert 'tensorflow imported: False' in out


def test_names_that_need_tensorflow_say_what_to_install():
    out = run_python(
        "try:\n"
        "    from tensorpack_lite import SimpleTrainer\n"
        "except ImportError as err:\n"
        "    print('ERROR:', err)\n"
        "import tensorpack_lite\n"
        "print('has __wrapped__:', hasattr(tensorpack_lite, '__wrapped__'))\n",
        without_tensorflow=True, timeout=120)
    assert 'ERROR: tensorpack_lite.SimpleTrainer is not available' in out
    assert 'pip install tensorflow-cpu' in out
    assert 'has __wrapped__: False' in out


def test_imgaug_and_dataset_are_there_without_importing_opencv():
    # (without TensorFlow, whose Keras imports OpenCV by itself)
    out = run_python(
        "import tensorpack_lite\n"
        "from tensorpack_lite import imgaug, dataset\n"
        "print('cv2 imported:', 'cv2' in sys.modules)\n"
        "print('Digits' in dir(dataset))\n", without_tensorflow=True, timeout=120)
    assert 'cv2 imported: False\nTrue' in out


@pytest.mark.parametrize('module', ['tensorpack_lite', 'tensorpack_lite.dataflow'])
def test_lazy_imgaug_is_the_real_package_on_use(module):
    imgaug = importlib.import_module(module).imgaug
    real = importlib.import_module('tensorpack_lite.dataflow.imgaug')
    assert imgaug.ImageAugmentor is real.ImageAugmentor
    assert 'Flip' in dir(imgaug)
