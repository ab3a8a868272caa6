"""dataflow.serialize: MsgpackSerializer / NumpySerializer / TFRecordSerializer round trips (every
dtype TF feeds, nested structures), shuffling, the tf.data side, and clear errors."""

import numpy as np
import pytest

from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import DataFromList, MsgpackSerializer, NumpySerializer, TFRecordSerializer
from helpers.dataflows import loaded

TF_DTYPES = ['bool', 'float16', 'float32', 'float64', 'int8', 'int16', 'int32', 'int64', 'uint8',
             'uint16', 'uint32', 'uint64', 'complex64', 'complex128']


def component(dtype, i):
    """A (2, 3) array of ``dtype`` that differs with ``i``."""
    values = (np.arange(6).reshape(2, 3) + i) % 5
    return (values > 1) if dtype == 'bool' else values.astype(dtype)


def typed_datapoints(n=4):
    """Lists of components: one array per dtype, a string array, a 0-d value, an empty array."""
    return [[component(dt, i) for dt in TF_DTYPES]
            + [np.array([b'img%d' % i, b'\x00raw'], dtype=object), np.float32(i / 2),
               np.zeros((0, 4), np.int64)]
            for i in range(n)]


def assert_same(got, expected):
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        assert g.shape == e.shape
        if e.dtype == object:
            assert g.dtype == object and g.tolist() == e.tolist()
        else:
            assert g.dtype == e.dtype, (g.dtype, e.dtype)
            np.testing.assert_array_equal(g, e)


@pytest.mark.quick
@pytest.mark.parametrize('serializer', [MsgpackSerializer, NumpySerializer])
def test_round_trip_of_every_dtype_and_nested_structures(serializer, tmp_path):
    dps = typed_datapoints() + [{'image': np.ones((3, 3), np.float16), 'meta': {'id': 7, 'tags': ['a', 'b']},
                                 'boxes': [np.zeros((2, 4), np.float32), None]}]
    path = str(tmp_path / 'data')
    serializer.save(DataFromList(dps, shuffle=False), path)
    df = serializer.load(path, shuffle=False)
    assert len(df) == len(dps)
    out = loaded(df)
    for got, expected in zip(out[:-1], dps[:-1]):
        assert_same(got, expected)
    nested = out[-1]
    assert nested['meta'] == {'id': 7, 'tags': ['a', 'b']} and nested['boxes'][1] is None
    assert nested['image'].dtype == np.float16 and nested['boxes'][0].shape == (2, 4)


def test_msgpack_shuffles_each_epoch_and_keeps_every_datapoint(tmp_path):
    path = str(tmp_path / 'data.msgpack')
    MsgpackSerializer.save(DataFromList([[i] for i in range(50)], shuffle=False), path)
    df = MsgpackSerializer.load(path, shuffle=True)
    df.reset_state()
    first, second = [dp[0] for dp in df], [dp[0] for dp in df]
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != list(range(50)) and first != second


def test_msgpack_refuses_other_files(tmp_path):
    path = tmp_path / 'junk'
    path.write_bytes(b'x' * 100)
    with pytest.raises(ValueError, match='not a MsgpackSerializer file'):
        MsgpackSerializer.load(str(path))


@pytest.mark.parametrize('serializer', [MsgpackSerializer, NumpySerializer, TFRecordSerializer])
def test_unserializable_datapoint_is_named_and_no_file_is_left(serializer, tmp_path):
    class Opaque(object):
        pass
    dps = [[np.zeros(2), 1], [np.zeros(2), Opaque()]]
    path = tmp_path / 'data'
    with pytest.raises(TypeError) as info:
        serializer.save(DataFromList(dps, shuffle=False), str(path))
    message = str(info.value)
    assert 'datapoint #1' in message and 'Opaque' in message
    assert '[1]' in message or 'component 1' in message
    assert list(tmp_path.iterdir()) == []  # neither a partial file nor its temporary


def test_tfrecord_round_trip_on_the_dataflow_side(tmp_path):
    dps = typed_datapoints()
    path = str(tmp_path / 'data.tfrecord')
    TFRecordSerializer.save(DataFromList(dps, shuffle=False), path)
    df = TFRecordSerializer.load(path)
    assert len(df) == len(dps)
    for got, expected in zip(loaded(df), dps):
        assert_same(got, expected)
    with pytest.raises(ValueError, match='no index'):
        TFRecordSerializer.load(path, shuffle=True)


def test_tfrecord_is_readable_by_tf_data(tmp_path):
    dps = typed_datapoints()
    path = str(tmp_path / 'data.tfrecord')
    TFRecordSerializer.save(DataFromList(dps, shuffle=False), path)
    dataset = TFRecordSerializer.load_tf_dataset(path)
    assert len(dataset.element_spec) == len(dps[0])
    next_dp = tfv1.data.make_one_shot_iterator(dataset).get_next()
    with tfv1.Session() as sess:
        for expected in dps:
            assert_same(sess.run(next_dp), expected)
        with pytest.raises(tfv1.errors.OutOfRangeError):
            sess.run(next_dp)


def test_tfrecord_dataset_names_a_dtype_change(tmp_path):
    path = str(tmp_path / 'data.tfrecord')
    TFRecordSerializer.save(DataFromList([[np.zeros(2, np.float32)], [np.zeros(2, np.int64)]],
                                         shuffle=False), path)
    next_dp = tfv1.data.make_one_shot_iterator(TFRecordSerializer.load_tf_dataset(path)).get_next()
    with tfv1.Session() as sess:
        sess.run(next_dp)
        with pytest.raises(tfv1.errors.InvalidArgumentError, match='component 0 has another dtype'):
            sess.run(next_dp)
