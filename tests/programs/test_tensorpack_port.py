"""examples/tensorpack_port.py (the shared part of the drivers that run tensorpack's own examples)
and examples/HED_tensorpack/fake_bsds500.py (the data of the HED driver)."""

import os
import sys

import numpy as np
import pytest
from helpers.paths import REPO_DIR

cv2 = pytest.importorskip('cv2')
pytest.importorskip('scipy.io')
EXAMPLES = os.path.join(REPO_DIR, 'examples')
sys.path.insert(0, EXAMPLES)
sys.path.insert(0, os.path.join(EXAMPLES, 'HED_tensorpack'))
from fake_bsds500 import make_fake_bsds500  # noqa: E402
from tensorpack_port import REPO, library_env, port  # noqa: E402

from tensorpack_lite.dataflow.dataset import BSDS500  # noqa: E402

SCRIPT = '''import os
import tensorflow as tf
from tensorpack import *
from tensorpack.dataflow import dataset
import tensorpack.utils.gpu as gpu
from mytensorpack import thing   # not tensorpack's
x = tf.placeholder  # tensorpack is mentioned here, not imported
MAX_EPOCH = 100
'''


def _example(tmp_path):
    src = tmp_path / 'src'
    (src / 'utils').mkdir(parents=True)
    (src / 'train_log').mkdir()
    (src / 'train_log' / 'old.txt').write_text('old run')
    (src / 'main.py').write_text(SCRIPT)
    (src / 'utils' / 'helper.py').write_text(SCRIPT)
    (src / 'README.md').write_text('from tensorpack import *\n')
    return src


def test_port_renames_imports_and_applies_each_change_once(tmp_path):
    src, dst = _example(tmp_path), tmp_path / 'dst'
    made = port(str(src), str(dst), [('main.py', 'MAX_EPOCH = 100', 'MAX_EPOCH = 2', 'short run')],
                tf1_modules=['utils/*.py'])
    assert made == ['imports: tensorpack -> tensorpack_lite in every .py',
                    'utils/helper.py: import tensorflow.compat.v1 as tf (TF1 names on TF 2)',
                    'main.py: short run']
    main, helper = (dst / 'main.py').read_text(), (dst / 'utils' / 'helper.py').read_text()
    for text in (main, helper):
        assert 'from tensorpack_lite import *\n' in text
        assert 'from tensorpack_lite.dataflow import dataset\n' in text
        assert 'import tensorpack_lite.utils.gpu as gpu\n' in text
        assert 'from mytensorpack import thing' in text
        assert '# tensorpack is mentioned here, not imported' in text
    assert '\nimport tensorflow as tf\n' in main and 'MAX_EPOCH = 2\n' in main
    assert '\nimport tensorflow.compat.v1 as tf\n' in helper and 'MAX_EPOCH = 100\n' in helper
    assert (dst / 'README.md').read_text() == 'from tensorpack import *\n'   # only .py files
    assert not (dst / 'train_log').exists()
    assert (src / 'main.py').read_text() == SCRIPT                           # the source is untouched


# changes apply after the renames: 'tensorpack_lite' is in the 3 renamed imports
@pytest.mark.parametrize('old, count', [('MAX_EPOCH = 99', 0), ('tensorpack_lite', 3)])
def test_a_change_that_does_not_match_exactly_once_stops_the_run(tmp_path, old, count):
    message = r"the change to main.py \(short run\) does not apply: '{}' occurs {} times".format(old, count)
    with pytest.raises(SystemExit, match=message):
        port(str(_example(tmp_path)), str(tmp_path / 'dst'), [('main.py', old, 'x', 'short run')])


def test_library_env_puts_this_repository_first_and_hides_gpus(monkeypatch):
    monkeypatch.setenv('PYTHONPATH', '/somewhere')
    env = library_env(TENSORPACK_DATASET='/data')
    assert env['PYTHONPATH'].split(os.pathsep) == [REPO, '/somewhere']
    assert os.path.isdir(os.path.join(REPO, 'tensorpack_lite'))
    assert env['CUDA_VISIBLE_DEVICES'] == '' and env['TENSORPACK_DATASET'] == '/data'


def test_fake_bsds500_reads_back_through_the_dataset(tmp_path):
    written = make_fake_bsds500(str(tmp_path), num_train=4, num_val=2, num_test=1, seed=3)
    assert {split: len(ids) for split, ids in written.items()} == {'train': 4, 'val': 2, 'test': 1}
    root = tmp_path / 'BSR' / 'BSDS500' / 'data'
    portrait = cv2.imread(str(root / 'images' / 'train' / (written['train'][2] + '.jpg')))
    assert portrait.shape == (481, 321, 3)                                   # every third is portrait
    df = BSDS500('train', data_dir=str(tmp_path), shuffle=False)
    df.reset_state()
    points = list(df)
    assert len(points) == 4
    for image, boundaries in points:
        assert image.shape == (321, 481, 3) and boundaries.shape == (321, 481)
        # 3 annotators, each missing one rectangle: averages 0, 1/3, 2/3 or 1, with edges to learn
        values = np.unique(boundaries)
        assert set(np.round(values * 3).astype(int)) <= {0, 1, 2, 3}
        assert 0.02 < (boundaries >= 0.5).mean() < 0.5
    assert len(BSDS500('val', data_dir=str(tmp_path))) == 2
    again = make_fake_bsds500(str(tmp_path / 'again'), num_train=4, num_val=2, num_test=1, seed=3)
    assert again == written
    first, second = (str(d / 'BSR' / 'BSDS500' / 'data' / 'images' / 'val' / '2001.jpg')
                     for d in (tmp_path, tmp_path / 'again'))
    np.testing.assert_array_equal(cv2.imread(first), cv2.imread(second))
