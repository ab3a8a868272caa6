"""tfutils basics: names, global step, session creation/initialization, collections,
the trainable-variable table and summary protos."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils import common
from tensorpack_lite.tfutils.collection import backup_collection, freeze_collection, restore_collection
from tensorpack_lite.tfutils.model_utils import describe_trainable_vars, get_shape_str
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator, ReuseSessionCreator, SessionCreatorAdapter
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.tfutils.summary import create_image_summary, create_scalar_summary


@pytest.mark.quick
def test_op_tensor_names():
    assert common.get_op_tensor_name('fc/W') == ('fc/W', 'fc/W:0')
    assert common.get_op_tensor_name('fc/W:1') == ('fc/W', 'fc/W:1')
    assert common.get_op_tensor_name('scope:name') == ('scope:name', 'scope:name:0')


def test_lookup_by_name():
    x = tf.constant(1.0, name='x')
    op = tfv1.no_op(name='nothing')
    assert common.get_tensors_by_names(['x', 'x:0']) == [x, x]
    assert common.get_op_or_tensor_by_name('x:0') is x
    assert common.get_op_or_tensor_by_name('nothing') is op
    assert common.get_op_or_tensor_by_name(['x:0', 'nothing']) == [x, op]
    with pytest.raises(KeyError, match='missing'):
        common.get_op_or_tensor_by_name('missing:0')


def test_global_step_var_is_unique_per_graph_and_readable():
    with tfv1.variable_scope('somewhere'):
        var = common.get_global_step_var()
    assert var.name == 'global_step:0'
    assert common.get_global_step_var() is var
    with tfv1.Graph().as_default():
        assert common.get_global_step_var() is not var
    with tfv1.Session() as sess:
        sess.run(var.initializer)
        sess.run(tfv1.assign(var, 17))
        assert common.get_global_step_value() == 17


def test_default_config_and_version():
    conf = common.get_default_sess_config(0.5)
    assert conf.allow_soft_placement
    assert conf.gpu_options.allow_growth
    assert conf.gpu_options.per_process_gpu_memory_fraction == pytest.approx(0.5)
    version = common.get_tf_version_tuple()
    assert version[0] == 2 and version == tuple(int(v) for v in tf.__version__.split('.')[:2])


def test_session_creators_initialize_and_reuse():
    var = tfv1.get_variable('v', [], initializer=tfv1.constant_initializer(3.0))
    local = tfv1.get_variable('l', [], initializer=tfv1.constant_initializer(4.0),
                              collections=[tfv1.GraphKeys.LOCAL_VARIABLES])
    sess = NewSessionCreator().create_session()
    assert sess.run([var, local]) == [3.0, 4.0]
    assert ReuseSessionCreator(sess).create_session() is sess
    wrapped = SessionCreatorAdapter(ReuseSessionCreator(sess), lambda s: ('wrapped', s))
    assert wrapped.create_session() == ('wrapped', sess)
    JustCurrentSession().init(sess)  # changes nothing
    assert sess.run(var) == 3.0
    sess.close()


def test_collections_backup_restore_freeze():
    key = 'my_things'
    tfv1.add_to_collection(key, 1)
    backup = backup_collection([key])
    tfv1.add_to_collection(key, 2)
    assert tfv1.get_collection(key) == [1, 2]
    restore_collection(backup)
    assert tfv1.get_collection(key) == [1]
    with freeze_collection([key]):
        tfv1.add_to_collection(key, 3)
        assert tfv1.get_collection(key) == [1, 3]
    assert tfv1.get_collection(key) == [1]
    assert key in backup_collection()


def test_describe_trainable_vars_table():
    tfv1.get_variable('conv/W', [3, 3, 1, 8])
    tfv1.get_variable('fc/b', [10], dtype=tf.float64)
    with tfv1.variable_scope('tower1'):
        tfv1.get_variable('copy', [100])
    text = describe_trainable_vars()
    assert 'conv/W' in text and '[3, 3, 1, 8]' in text and '72' in text
    assert 'float64' in text  # dtypes differ, so the column is shown
    assert 'tower1/copy' not in text
    assert 'Number of trainable variables: 2' in text
    assert 'Number of parameters (elements): 82' in text


def test_describe_without_variables_returns_none():
    assert describe_trainable_vars() is None


def test_get_shape_str():
    a = tfv1.placeholder(tf.float32, [None, 28, 28])
    b = tf.zeros([2])
    assert get_shape_str(a) == '[None, 28, 28]'
    assert get_shape_str([a, b]) == '[None, 28, 28], [2]'
    with pytest.raises(TypeError, match='takes tensors'):
        get_shape_str(np.zeros(2))


def test_scalar_and_image_summaries_roundtrip():
    scalar = create_scalar_summary('acc', np.float32(0.25))
    assert scalar.value[0].tag == 'acc' and scalar.value[0].simple_value == 0.25
    rng = np.random.RandomState(0)
    images = rng.randint(0, 256, size=(2, 5, 7, 3)).astype('uint8')
    summary = create_image_summary('samples', images)
    assert [v.tag for v in summary.value] == ['samples/0', 'samples/1']
    encoded = tfv1.placeholder(tf.string, [])
    decoded = tf.io.decode_png(encoded, channels=3)
    with tfv1.Session() as sess:
        for value, image in zip(summary.value, images):
            assert (value.image.height, value.image.width) == (5, 7)
            pixels = sess.run(decoded, {encoded: value.image.encoded_image_string})
            np.testing.assert_array_equal(pixels, image)
    gray = create_image_summary('gray', np.full((4, 4), 300.0))
    assert gray.value[0].tag == 'gray' and gray.value[0].image.colorspace == 1
    with pytest.raises(ValueError, match="'bad'"):
        create_image_summary('bad', np.zeros((1, 4, 4, 2)))
