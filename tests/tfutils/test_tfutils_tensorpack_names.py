"""The last names of tensorpack 0.11: tfutils.dependency, tfutils.symbolic_functions, the newer
checkpoint names of tfutils.varmanip, get_model_loader(ignore_mismatch=),
collect_env.parse_TF_build_info and the names importable from tensorpack's module paths."""

import os

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils import collect_env
from tensorpack_lite.tfutils.dependency import dependency_of_fetches, dependency_of_targets
from tensorpack_lite.tfutils.sessinit import DictRestore, SaverRestore, SaverRestoreRelaxed, get_model_loader
from tensorpack_lite.tfutils.symbolic_functions import print_stat, rms
from tensorpack_lite.tfutils.varmanip import (get_all_checkpoints, load_checkpoint_vars, load_chkpt_vars,
                                              save_checkpoint_vars, save_chkpt_vars)


# ----- dependency ---------------------------------------------------------------------------

def small_graph():
    """a -> b -> c; d alone; e runs after b (control dependency); var read by f."""
    a = tf.constant(1.0, name='a')
    b = tf.add(a, 1.0, name='b')
    c = tf.multiply(b, 2.0, name='c')
    d = tf.constant(5.0, name='d')
    with tf.control_dependencies([b]):
        e = tf.constant(0.0, name='e')
    var = tfv1.get_variable('v', initializer=3.0)
    f = tf.identity(var, name='f')
    return a, b, c, d, e, var, f


def test_dependency_of_targets_follows_inputs_and_control_inputs():
    a, b, c, d, e, var, f = small_graph()
    assert dependency_of_targets((c,), a) and dependency_of_targets((c,), b.op)
    assert dependency_of_targets((c,), c)                  # a target depends on itself
    assert not dependency_of_targets((c,), d)
    assert dependency_of_targets((e.op,), a)                # through the control dependency only
    assert not dependency_of_targets((a,), c)               # not the other way round
    assert dependency_of_targets((d, c), a)                 # any of the targets
    with pytest.raises(TypeError, match='op must be a tf.Operation or tf.Tensor'):
        dependency_of_targets((c,), 'a')


def test_dependency_of_fetches_takes_what_sess_run_takes():
    a, b, c, d, e, var, f = small_graph()
    assert dependency_of_fetches(c, a)
    assert dependency_of_fetches({'x': [d, (c,)], 'y': None}, a)      # nested, with a None
    assert not dependency_of_fetches({'x': [d], 'y': a}, c)
    assert dependency_of_fetches('c:0', b) and dependency_of_fetches('e', a)   # names of tensors, ops
    assert dependency_of_fetches([f], var.op) and not dependency_of_fetches([c], var.op)


# ----- symbolic_functions -------------------------------------------------------------------

def test_rms_value_and_names():
    x = tf.constant([[3.0, -4.0], [0.0, 0.0]], name='x')
    with tfv1.name_scope('scope'):
        default = rms(x)          # named after x, outside the current scope
        named = rms(x, name='mine')
    assert default.op.name == 'x/rms' and named.op.name == 'scope/mine'
    with tfv1.Session() as sess:
        np.testing.assert_allclose(sess.run([default, named]), [2.5, 2.5])


def test_print_stat_prints_shape_mean_rms_and_passes_the_value(capfd):
    x = tf.constant([3.0, -4.0], name='x')
    out = print_stat(x, message='stat of x')
    ints = print_stat(tf.constant([2, 4], name='k'))
    assert out.op.name == 'print_x' and ints.op.name == 'print_k'
    capfd.readouterr()
    with tfv1.Session() as sess:
        value, int_value = sess.run([out, ints])
    err = capfd.readouterr().err
    np.testing.assert_array_equal(value, [3.0, -4.0])
    np.testing.assert_array_equal(int_value, [2, 4])
    lines = [line.strip() for line in err.splitlines() if line.strip()]
    assert 'stat of x [2] -0.5 3.53553391 [3 -4]' in lines
    assert 'k [2] 3 [2 4]' in lines                       # no rms for integers


# ----- varmanip -----------------------------------------------------------------------------

def test_newer_checkpoint_names_are_the_same_functions():
    assert load_checkpoint_vars is load_chkpt_vars and save_checkpoint_vars is save_chkpt_vars


def test_save_and_load_checkpoint_vars_as_checkpoint_and_npz(tmp_path):
    values = {'fc/W': np.arange(6, dtype='float32').reshape(2, 3), 'step': np.int64(7)}
    for path in (str(tmp_path / 'model-7'), str(tmp_path / 'params.npz')):
        save_checkpoint_vars(values, path)
        loaded = load_checkpoint_vars(path)
        assert sorted(loaded) == ['fc/W', 'step']
        np.testing.assert_array_equal(loaded['fc/W'], values['fc/W'])
        assert loaded['step'] == 7
    np.savez(str(tmp_path / 'tensor_names.npz'), **{'fc/b:0': np.ones(2, 'float32')})
    assert list(load_checkpoint_vars(str(tmp_path / 'tensor_names.npz'))) == ['fc/b']   # ':0' dropped


def test_get_all_checkpoints_sorted_by_step(tmp_path):
    for step in (1000, 20, 300):
        save_checkpoint_vars({'w': np.full(2, step, 'float32')}, str(tmp_path / 'model-{}'.format(step)))
    save_checkpoint_vars({'w': np.zeros(2, 'float32')}, str(tmp_path / 'other-5'))
    open(str(tmp_path / 'model-best.index'), 'w').close()       # not a step
    found = get_all_checkpoints(str(tmp_path))
    assert found == [(os.path.join(str(tmp_path), 'model-{}.index'.format(s)), s) for s in (20, 300, 1000)]
    np.testing.assert_array_equal(load_checkpoint_vars(found[-1][0])['w'], [1000, 1000])
    others = get_all_checkpoints(str(tmp_path), prefix='other')
    assert others == [(os.path.join(str(tmp_path), 'other-5.index'), 5)]


# ----- get_model_loader(ignore_mismatch=) ---------------------------------------------------

def restore_into_fresh_graph(loader):
    with tfv1.Graph().as_default():
        w = tfv1.get_variable('w', initializer=np.zeros(3, 'float32'))
        b = tfv1.get_variable('b', initializer=np.zeros(2, 'float32'))
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            loader.init(sess)
            return sess.run([w, b])


def test_get_model_loader_ignore_mismatch(tmp_path):
    npz, ckpt = str(tmp_path / 'p.npz'), str(tmp_path / 'model-1')
    values = {'w': np.full(4, 5.0, 'float32'), 'b': np.full(2, 7.0, 'float32')}   # w: wrong shape
    np.savez(npz, **values)
    save_checkpoint_vars(values, ckpt)
    for path in (npz, ckpt):
        with pytest.raises(ValueError):
            restore_into_fresh_graph(get_model_loader(path))
        w, b = restore_into_fresh_graph(get_model_loader(path, ignore_mismatch=True))
        np.testing.assert_array_equal(w, np.zeros(3))          # skipped
        np.testing.assert_array_equal(b, [7.0, 7.0])           # restored
    assert type(get_model_loader(ckpt)) is SaverRestore
    assert type(get_model_loader(ckpt, ignore_mismatch=True)) is SaverRestoreRelaxed
    assert type(get_model_loader(values)) is DictRestore       # as SmartInit, which it is in tensorpack 0.11


# ----- collect_env.parse_TF_build_info ------------------------------------------------------

def test_parse_tf_build_info(monkeypatch):
    assert collect_env.parse_TF_build_info() == {}              # a CPU build names no CUDA
    monkeypatch.setattr(tf.sysconfig, 'get_build_info', lambda: {
        'is_cuda_build': True, 'cuda_version': '12.3', 'cudnn_version': '8',
        'cuda_compute_capabilities': ['sm_70', 'compute_80']})
    assert list(collect_env.parse_TF_build_info().items()) == [
        ('TF built with CUDA', '12.3'), ('TF built with CUDNN', '8'), ('TF compute capabilities', 'sm_70,80')]


# ----- tensorpack's module paths ------------------------------------------------------------

def test_names_at_tensorpacks_module_paths_are_the_same_objects():
    from tensorpack_lite.callbacks import debug, graph, misc, stats
    from tensorpack_lite.graph_builder import devices, utils
    from tensorpack_lite.input_source import input_source, input_source_base
    assert graph.DumpParamAsImage is debug.DumpParamAsImage and graph.DumpTensors is debug.DumpTensors
    assert misc.InjectShell is stats.InjectShell and misc.SendStat is stats.SendStat
    assert utils.LeastLoadedDeviceSetter is devices.LeastLoadedDeviceSetter
    assert input_source.FeedfreeInput is input_source_base.FeedfreeInput
