"""The converter of ``tensorpack_lite.dataflow.shards.convert`` (issue 69 item 1): a DataFlow given as
MODULE:CALLABLE, an LMDB database, a TFRecord file and an image folder, each converted into shards
(a directory, or a bucket of a real S3 server) and read back equal to the source; a bad source
stops with the culprit named."""

import json
import os
import re
import sys

import numpy as np
import pytest

from helpers.processes import run_bounded, subprocess_env
from tensorpack_lite.dataflow import DataFromList, LMDBSerializer, ShardedData, TFRecordSerializer
from tensorpack_lite.dataflow.shards.convert import IMAGE_EXTENSIONS, image_folder, main
from tensorpack_lite.utils.serialize import dumps


def datapoints(count=30):
    """Datapoints of an image, a label and a float: ``[3x4x4 uint8, int32, float32 array]``."""
    rng = np.random.RandomState(7)
    return [[rng.randint(0, 256, (3, 4, 4)).astype(np.uint8), np.int32(i % 5), rng.rand(2).astype(np.float32)]
            for i in range(count)]


def read_back(url, **kwargs):
    """The datapoints of the shards at ``url``, in the order they were written."""
    df = ShardedData(url, shuffle=False, lanes=1, **kwargs)
    df.reset_state()
    return list(df)


def assert_same(got, expected):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert type(x) is type(y) and np.asarray(x).dtype == np.asarray(y).dtype
            assert np.array_equal(np.asarray(x), np.asarray(y))


def shard_count(directory):
    with open(os.path.join(directory, 'index.json')) as f:
        return len(json.load(f)['shards'])


@pytest.fixture
def flows_module(tmp_path, monkeypatch):
    """An importable module ``shard_flows`` whose ``flow()`` returns a DataFlow of :func:`datapoints`
    and ``not_a_flow()`` a list."""
    (tmp_path / 'shard_flows.py').write_text(
        "from tensorpack_lite.dataflow import DataFromList\n"
        "DATA = []\n"
        "def flow():\n"
        "    return DataFromList(DATA, shuffle=False)\n"
        "def not_a_flow():\n"
        "    return [1, 2]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, 'shard_flows', raising=False)   # removed again at the end
    import shard_flows
    shard_flows.DATA[:] = datapoints()


def test_a_dataflow_callable_is_converted_with_a_progress_bar(flows_module, tmp_path, capsys):
    assert main(['dataflow', 'shard_flows:flow', str(tmp_path / 'out'), '--shard-bytes', '300']) == 0
    assert_same(read_back(str(tmp_path / 'out')), datapoints())
    assert shard_count(tmp_path / 'out') > 1
    assert '30/30' in capsys.readouterr().err   # the progress bar, at its end


@pytest.mark.parametrize('size, limit', [('1000000', 10 ** 6), ('1kB', 1000), ('1KiB', 1024), ('0.5kb', 500)])
def test_shard_bytes_takes_units(tmp_path, size, limit):
    """A shard closes at the record that makes it reach the limit."""
    LMDBSerializer.save(DataFromList(datapoints(), shuffle=False), str(tmp_path / 'db'))
    out = str(tmp_path / 'out')
    assert main(['lmdb', str(tmp_path / 'db'), out, '--shard-bytes', size, '--no-progress']) == 0
    per_shard = -(-limit // len(dumps(datapoints()[0])))   # every record has the same size
    assert shard_count(tmp_path / 'out') == -(-30 // per_shard)


def test_an_lmdb_database_is_converted(tmp_path):
    LMDBSerializer.save(DataFromList(datapoints(), shuffle=False), str(tmp_path / 'db'))
    assert main(['lmdb', str(tmp_path / 'db'), str(tmp_path / 'out'), '--shard-bytes', '500']) == 0
    assert_same(read_back(str(tmp_path / 'out')), datapoints())


def test_a_tfrecord_file_is_converted(tmp_path):
    TFRecordSerializer.save(DataFromList(datapoints(), shuffle=False), str(tmp_path / 'x.tfrecord'))
    assert main(['tfrecord', str(tmp_path / 'x.tfrecord'), str(tmp_path / 'out'), '--shard-bytes', '2kB']) \
        == 0
    source = TFRecordSerializer.load(str(tmp_path / 'x.tfrecord'))   # scalars come back as 0-d arrays
    source.reset_state()
    assert_same(read_back(str(tmp_path / 'out')), list(source))


@pytest.fixture
def images(tmp_path):
    """An image folder: classes 'cat' (3 PNGs, and a text file) and 'ant' (2 JPEGs)."""
    cv2 = pytest.importorskip('cv2')
    rng = np.random.RandomState(3)
    for name, ext, count in (('cat', '.png', 3), ('ant', '.JPG', 2)):
        os.makedirs(str(tmp_path / 'images' / name))
        for i in range(count):
            img = rng.randint(0, 256, (5 + i, 6, 3)).astype(np.uint8)
            assert cv2.imwrite(str(tmp_path / 'images' / name / '{}{}'.format(i, ext)), img)
    (tmp_path / 'images' / 'cat' / 'notes.txt').write_text('not an image')
    return tmp_path / 'images'


def test_an_image_folder_is_converted_to_the_files_bytes_and_labels(images, tmp_path):
    assert main(['images', str(images), str(tmp_path / 'out'), '--shard-bytes', '1kB']) == 0
    files = [('ant', '0.JPG'), ('ant', '1.JPG'), ('cat', '0.png'), ('cat', '1.png'), ('cat', '2.png')]
    expected = [[(images / name / f).read_bytes(), np.int32(name == 'cat')] for name, f in files]
    assert_same(read_back(str(tmp_path / 'out')), expected)
    assert image_folder(str(images)).classes == ['ant', 'cat'] and '.jpg' in IMAGE_EXTENSIONS


def test_an_image_folder_is_converted_decoded(images, tmp_path):
    cv2 = pytest.importorskip('cv2')
    assert main(['images', str(images), str(tmp_path / 'out'), '--decode']) == 0
    got = read_back(str(tmp_path / 'out'))
    assert [int(label) for _, label in got] == [0, 0, 1, 1, 1]
    assert np.array_equal(got[2][0], cv2.imread(str(images / 'cat' / '0.png')))   # BGR, as OpenCV reads
    assert got[4][0].shape == (7, 6, 3) and got[4][0].dtype == np.uint8


@pytest.mark.parametrize('args, culprit', [
    (['lmdb', '{tmp}/missing.lmdb'], "lmdb source {tmp}/missing.lmdb: .* {tmp}/missing.lmdb does not exist"),
    (['lmdb', '{tmp}/junk'], "lmdb source {tmp}/junk: .*{tmp}/junk is not a readable LMDB database"),
    (['tfrecord', '{tmp}/missing.tfrecord'], "the TFRecord file {tmp}/missing.tfrecord does not exist"),
    (['tfrecord', '{tmp}/junk'], "{tmp}/junk is not a TFRecord file written by TFRecordSerializer"),
    (['images', '{tmp}/missing'], "the image folder {tmp}/missing does not exist"),
    (['images', '{tmp}'], "the image folder {tmp} has no subfolder"),
    (['dataflow', 'os:getcwd'], "'os:getcwd' returned a str, not a DataFlow"),
    (['dataflow', 'os.path'], "must be given as MODULE:CALLABLE .*got 'os.path'"),
    (['dataflow', 'no_such_module_69:flow'], "cannot import the module 'no_such_module_69'"),
    (['dataflow', 'os:no_such_flow'], "'os:no_such_flow': <module 'os'.* has no attribute 'no_such_flow'"),
    (['dataflow', 'os:sep'], "'os:sep' is a str, not a callable"),
    (['lmdb', '{tmp}/junk', '--decode'], "--decode is for the images source only"),
    (['lmdb', '{tmp}/junk', '--shard-bytes', '12 apples'], "'12 apples' is not a size in bytes"),
    (['lmdb', '{tmp}/junk', '--shard-bytes', '0'], "the size must be at least 1 byte"),
])
def test_a_bad_source_is_named(tmp_path, capsys, args, culprit):
    (tmp_path / 'junk').write_bytes(b'this is neither an LMDB database nor a TFRecord file' * 3)
    tmp = str(tmp_path)
    with pytest.raises(SystemExit) as exit:
        main([a.format(tmp=tmp) for a in args] + [tmp + '/out'])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert re.search(culprit.format(tmp=re.escape(tmp)), err), err
    assert not os.path.exists(tmp + '/out')


def test_a_callable_that_does_not_return_a_dataflow_is_named(flows_module, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(['dataflow', 'shard_flows:not_a_flow', str(tmp_path / 'out')])
    assert "'shard_flows:not_a_flow' returned a list, not a DataFlow" in capsys.readouterr().err


def test_an_lmdb_database_is_converted_into_a_bucket(s3, tmp_path):
    LMDBSerializer.save(DataFromList(datapoints(), shuffle=False), str(tmp_path / 'db'))
    assert main(['lmdb', str(tmp_path / 'db'), 's3://bucket/lmdb', '--shard-bytes', '500']) == 0
    assert sorted(s3.objects('lmdb'))[:2] == ['index.json', 'shard-00000.tpls']
    assert_same(read_back('s3://bucket/lmdb', cache_dir=str(tmp_path / 'cache')), datapoints())


def test_the_command_line_converts_into_a_bucket(s3_server, tmp_path):
    """``python -m tensorpack_lite.dataflow.shards.convert``, the endpoint as a storage option."""
    TFRecordSerializer.save(DataFromList(datapoints(), shuffle=False), str(tmp_path / 'x.tfrecord'))
    env = subprocess_env(AWS_ACCESS_KEY_ID='testing', AWS_SECRET_ACCESS_KEY='testing',
                         AWS_DEFAULT_REGION='us-east-1', AWS_ENDPOINT_URL=None)
    code, output = run_bounded(
        [sys.executable, '-m', 'tensorpack_lite.dataflow.shards.convert', 'tfrecord',
         str(tmp_path / 'x.tfrecord'), 's3://bucket/cli',
         '--storage-option', 'endpoint_url=' + s3_server.endpoint], 240, env=env)
    assert code == 0, output
    assert '30/30' in output and 'save_shards: 30 datapoints in 1 shards at s3://bucket/cli' in output
    index = json.loads(s3_server.objects('cli')['index.json'])
    assert index['total'] == 30 and [s['name'] for s in index['shards']] == ['shard-00000.tpls']
