"""Saving and restoring: ModelSaver / MinSaver / MaxSaver, the SessionInits, varmanip."""

import logging
import os
import re

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import MaxSaver, MinSaver, ModelSaver
from tensorpack_lite.callbacks.trigger import PeriodicTrigger
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.tfutils.common import get_global_step_var
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import (
    ChainInit, DictRestore, JustCurrentSession, SaverRestore, SaverRestoreRelaxed, SessionInit,
    SmartInit, get_model_loader)
from tensorpack_lite.tfutils.varmanip import (
    SessionUpdate, dump_session_params, get_checkpoint_path, load_chkpt_vars, save_chkpt_vars)
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train.base import StopTraining, Trainer

from helpers.models import LineRegression


def build_regression(out_dim=3, extra=False):
    """A 4 -> 8 -> out_dim regression trained with Adam (so there are slot variables);
    returns the train op."""
    rng = np.random.RandomState(0)
    x = tf.constant(rng.randn(16, 4).astype('float32'))
    y = tf.constant(rng.randn(16, out_dim).astype('float32'))
    w0 = tfv1.get_variable('fc0/W', initializer=rng.randn(4, 8).astype('float32'))
    b0 = tfv1.get_variable('fc0/b', initializer=np.zeros(8, 'float32'))
    w1 = tfv1.get_variable('fc1/W', initializer=rng.randn(8, out_dim).astype('float32'))
    pred = tf.matmul(tf.nn.relu(tf.matmul(x, w0) + b0), w1)
    if extra:
        pred = pred * tfv1.get_variable('extra', initializer=np.float32(2.0))
    loss = tf.reduce_mean(tf.square(pred - y), name='loss')
    get_global_step_var()  # as a trainer would create it
    return tfv1.train.AdamOptimizer(0.05).minimize(loss)


def current_values(sess):
    variables = tfv1.global_variables()
    return {v.op.name: value for v, value in zip(variables, sess.run(variables))}


class RecordAtTrigger(Callback):
    """Records the value of every global variable at each trigger (end of epoch), by step."""

    def __init__(self):
        self.values = {}

    def _trigger(self):
        self.values[self.global_step] = current_values(self.trainer.sess)


class PutStat(Callback):
    """Puts the next of some known values as statistic ``name`` at each trigger."""

    def __init__(self, name, values):
        self.name, self.pending = name, list(values)

    def _trigger(self):
        self.trainer.monitors.put_scalar(self.name, self.pending.pop(0))


def train(callbacks, steps_per_epoch=3, max_epoch=4, session_init=None, **model_kwargs):
    trainer = Trainer()
    trainer.train_op = build_regression(**model_kwargs)
    trainer.train(callbacks, [], NewSessionCreator(), session_init or JustCurrentSession(),
                  steps_per_epoch, 1, max_epoch)
    return trainer


def fresh_session(**model_kwargs):
    """A new graph with the regression model and an initialized session in it."""
    graph = tf.Graph()
    with graph.as_default():
        build_regression(**model_kwargs)
        sess = NewSessionCreator().create_session()
    return graph, sess


def init_fresh(session_init, **model_kwargs):
    """The variable values after ``session_init`` in a fresh graph, and those it started with."""
    graph = tf.Graph()
    with graph.as_default():
        build_regression(**model_kwargs)
        sess = NewSessionCreator().create_session()
        before = current_values(sess)
        session_init.init(sess)
        after = current_values(sess)
        sess.close()
    return before, after


def assert_values_equal(got, expected, names=None):
    for name in (names if names is not None else expected):
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


# ---------------------------------------------------------------------------------------------
# ModelSaver
# ---------------------------------------------------------------------------------------------

@pytest.mark.quick
def test_model_saver_saves_each_epoch_keeps_max_and_state_points_to_last(logdir, log_records):
    record = RecordAtTrigger()
    train([ModelSaver(max_to_keep=2), record])
    # four epochs of 3 steps: saved at 3, 6, 9, 12; only the last two kept
    saves = [m for m in log_records.messages() if m.startswith('Model saved to')]
    assert len(saves) == 4, saves  # after_train did not save step 12 a second time
    files = sorted(f for f in os.listdir(logdir) if f.startswith('model-'))
    assert files == ['model-12.data-00000-of-00001', 'model-12.index', 'model-12.resume',
                     'model-9.data-00000-of-00001', 'model-9.index', 'model-9.resume']
    state = tfv1.train.get_checkpoint_state(logdir)
    assert state.model_checkpoint_path == os.path.join(logdir, 'model-12')
    assert list(state.all_model_checkpoint_paths) == [os.path.join(logdir, 'model-9'),
                                                      os.path.join(logdir, 'model-12')]
    with open(os.path.join(logdir, 'checkpoint')) as f:
        assert 'model_checkpoint_path: "model-12"' in f.read()  # relative: the dir can move
    assert any(f.startswith('graph-') and f.endswith('.meta') for f in os.listdir(logdir))
    for step in (9, 12):
        saved = load_chkpt_vars(os.path.join(logdir, 'model-{}'.format(step)))
        assert int(saved['global_step']) == step
        assert_values_equal(saved, record.values[step])
    assert not np.array_equal(record.values[9]['fc0/W'], record.values[12]['fc0/W'])


def test_rotation_keeps_what_a_resume_needs_whatever_max_to_keep(logdir):
    """Checkpoints every 2 steps and at each epoch's end (3 steps), max_to_keep=1: the newest
    checkpoint, the newest with a resume state and the two newest epoch ends stay; a step that
    raised (a checkpoint without resume state) pushes none of them out."""
    class FailInStep(Callback):     # the error is raised inside step 12's hooked run
        def _before_run(self, ctx):
            if self.global_step == 11:
                raise RuntimeError('step 12 fails')

    saver = ModelSaver(max_to_keep=1, background=False)
    with pytest.raises(RuntimeError, match='step 12 fails'):
        train([PeriodicTrigger(saver, every_k_steps=2, every_k_epochs=1), FailInStep()])
    files = sorted(f for f in os.listdir(logdir)
                   if f.startswith('model-') and f.endswith(('.index', '.resume')))
    # 11: the newest (saved as training ended, inside a step: no resume state); 10: the newest
    # with a resume state (step 1 of epoch 4); 9 and 6: the newest epoch ends
    assert files == ['model-10.index', 'model-10.resume', 'model-11.index', 'model-6.index', 'model-6.resume',
                     'model-9.index', 'model-9.resume']


class StopAtStep(Callback):
    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.global_step == self.step:
            raise StopTraining("enough")


def test_model_saver_saves_when_training_ends_mid_epoch(tmp_path):
    ckpt_dir = str(tmp_path / 'ckpt')
    trainer = train([ModelSaver(checkpoint_dir=ckpt_dir), StopAtStep(5)])
    assert trainer.global_step == 5
    assert tfv1.train.latest_checkpoint(ckpt_dir) == os.path.join(ckpt_dir, 'model-5')
    assert int(load_chkpt_vars(ckpt_dir)['global_step']) == 5
    assert os.path.exists(os.path.join(ckpt_dir, 'model-3.index'))  # end of epoch 1


def test_savers_need_a_directory_when_set_up():
    # Made without a logger directory (as on a non-chief Horovod rank, which never sets it up): fine.
    savers = [ModelSaver(), MinSaver('err'), MaxSaver('acc')]
    assert [s.checkpoint_dir for s in savers] == [None, None, None]
    for saver in savers:
        with tfv1.Graph().as_default():
            with pytest.raises(ValueError, match='{} has nowhere to save: pass checkpoint_dir'.format(
                    type(saver).__name__)):
                train([saver], max_epoch=1)


def test_model_saver_var_collections_still_saves_global_step(tmp_path):
    train([ModelSaver(checkpoint_dir=str(tmp_path), var_collections=tfv1.GraphKeys.TRAINABLE_VARIABLES)],
          max_epoch=1)
    saved = load_chkpt_vars(str(tmp_path))
    assert sorted(saved) == ['fc0/W', 'fc0/b', 'fc1/W', 'global_step']  # no Adam slots


# ---------------------------------------------------------------------------------------------
# MinSaver / MaxSaver, end to end through launch_train_with_config
# ---------------------------------------------------------------------------------------------

def test_min_and_max_saver_keep_the_best_checkpoint(logdir):
    rng = np.random.RandomState(1)
    points = [[rng.randn(4).astype('float32'), np.float32(rng.randn())] for _ in range(8)]
    record = RecordAtTrigger()
    errors = [5.0, 3.0, 4.0, 1.0, 2.0]      # smallest at epoch 4
    accuracies = [0.1, 0.7, 0.9, 0.2, 0.9]  # largest first reached at epoch 3 (a tie is no better)
    min_saver, max_saver = MinSaver('val-error'), MaxSaver('accuracy', filename='best-acc')
    model = LineRegression(dim=4, init=0.5, lr=0.1, lr_variable=False)
    config = TrainConfig(model=model, dataflow=BatchData(DataFromList(points, shuffle=False), 4),
                         callbacks=[ModelSaver(max_to_keep=1), PutStat('val-error', errors),
                                    PutStat('accuracy', accuracies), record, min_saver, max_saver],
                         max_epoch=5)
    launch_train_with_config(config, SimpleTrainer())
    steps = config.steps_per_epoch
    assert steps == 2
    assert min_saver.best == (4 * steps, 1.0) and max_saver.best == (3 * steps, 0.9)
    best_min = load_chkpt_vars(os.path.join(logdir, 'min-val-error'))
    best_max = load_chkpt_vars(os.path.join(logdir, 'best-acc'))
    assert int(best_min['global_step']) == 4 * steps and int(best_max['global_step']) == 3 * steps
    assert_values_equal(best_min, record.values[4 * steps], ['w', 'global_step'])
    assert_values_equal(best_max, record.values[3 * steps], ['w', 'global_step'])
    assert not np.array_equal(best_min['w'], best_max['w'])
    assert not [f for f in os.listdir(logdir) if f.endswith(('.tmp', '.commit'))]
    # the best checkpoint is loadable as such
    assert isinstance(SmartInit(os.path.join(logdir, 'min-val-error')), SaverRestore)


def test_relative_logger_directory_checkpoints_resolve(tmp_path, monkeypatch):
    """A logger directory given relative to the working directory (the examples' default
    train_log/NAME): the state file names checkpoints relative to the directory, so MaxSaver
    and restoring find them, from there and after the directory is moved."""
    from tensorpack_lite.utils import logger
    monkeypatch.chdir(tmp_path)
    logger.set_logger_dir(os.path.join('train_log', 'run'), action='d')
    max_saver = MaxSaver('accuracy')
    train([ModelSaver(), PutStat('accuracy', [0.5, 0.9]), max_saver], max_epoch=2)
    assert max_saver.best == (6, 0.9)
    with open(os.path.join('train_log', 'run', 'checkpoint')) as f:
        assert 'model_checkpoint_path: "model-6"' in f.read()
    os.rename('train_log', 'moved')
    saved = load_chkpt_vars(os.path.join('moved', 'run'))
    assert int(saved['global_step']) == 6
    assert int(load_chkpt_vars(os.path.join('moved', 'run', 'max-accuracy'))['global_step']) == 6


def test_min_saver_errors_name_the_stat_and_the_missing_checkpoint(tmp_path):
    with pytest.raises(KeyError, match="'val-error' was never put"):
        train([ModelSaver(checkpoint_dir=str(tmp_path)), MinSaver('val-error', checkpoint_dir=str(tmp_path))],
              max_epoch=1)
    with tfv1.Graph().as_default():
        with pytest.raises(RuntimeError, match='no checkpoint to copy.*ModelSaver'):
            train([PutStat('err', [1.0]), MinSaver('err', checkpoint_dir=str(tmp_path / 'empty'))],
                  max_epoch=1)


class FakeMonitors:
    def __init__(self):
        self.history = []

    def get_history(self, name):
        return self.history if name == 'err' else []


def write_model(directory, step, value):
    prefix = os.path.join(directory, 'model-{}'.format(step))
    save_chkpt_vars({'w': np.full((50, 50), value, 'float32'), 'global_step': np.int64(step)}, prefix)
    tfv1.train.update_checkpoint_state(directory, prefix)


def test_min_saver_copy_is_crash_safe(tmp_path, monkeypatch):
    directory = str(tmp_path)
    trainer = type('FakeTrainer', (), {})()
    trainer.monitors = FakeMonitors()
    saver = MinSaver('err', checkpoint_dir=directory)
    saver.setup_graph(trainer)
    best = os.path.join(directory, 'min-err')

    write_model(directory, 10, 1.0)
    trainer.monitors.history.append((10, 2.0))
    saver.trigger()
    assert load_chkpt_vars(best)['w'][0, 0] == 1.0

    write_model(directory, 20, 7.0)
    trainer.monitors.history.append((20, 1.5))

    def half_copy(src, dst, **kwargs):  # dies half-way through writing the first file
        with open(src, 'rb') as fin, open(dst, 'wb') as fout:
            fout.write(fin.read()[:100])
        raise OSError("disk died")

    real_replace = os.replace
    calls = []

    def replace_failing_at(n):
        def replace(src, dst):
            calls.append(dst)
            if len(calls) == n:
                raise OSError("crash in rename {}".format(n))
            return real_replace(src, dst)
        return replace

    for patch_target, patch in [('shutil.copyfile', half_copy), ('os.replace', replace_failing_at(1))]:
        with monkeypatch.context() as m:
            m.setattr(patch_target, patch)
            with pytest.raises(OSError):
                saver.trigger()
        saver._stat.last_seen_step = None  # let the same statistic be considered again
        saved = load_chkpt_vars(best)
        assert int(saved['global_step']) == 10 and np.all(saved['w'] == 1.0)  # previous best intact
        assert saver.best == (10, 2.0)
        assert sorted(f for f in os.listdir(directory) if f.startswith('min-err')) == [
            'min-err.data-00000-of-00001', 'min-err.index']

    # A crash between the renames (data moved, index not yet): the next start completes it.
    calls.clear()
    with monkeypatch.context() as m:
        m.setattr('os.replace', replace_failing_at(3))  # 1: marker, 2: data, 3: index
        with pytest.raises(OSError, match='rename 3'):
            saver.trigger()
    assert calls[1].endswith('min-err.data-00000-of-00001') and calls[2].endswith('min-err.index')
    MinSaver('err', checkpoint_dir=directory).before_train()
    saved = load_chkpt_vars(best)
    assert int(saved['global_step']) == 20 and np.all(saved['w'] == 7.0)
    assert sorted(f for f in os.listdir(directory) if f.startswith('min-err')) == [
        'min-err.data-00000-of-00001', 'min-err.index']


# ---------------------------------------------------------------------------------------------
# Restoring
# ---------------------------------------------------------------------------------------------

def test_save_then_restore_is_bitwise_equal_and_training_resumes(tmp_path):
    ckpt_dir = str(tmp_path)
    record = RecordAtTrigger()
    train([ModelSaver(checkpoint_dir=ckpt_dir), record], max_epoch=2)
    final = record.values[6]
    assert any(name.endswith('/Adam') for name in final)

    with tfv1.Graph().as_default():
        before, after = init_fresh(SaverRestore(ckpt_dir))
    assert sorted(after) == sorted(final)
    assert_values_equal(after, final)  # every variable, incl. global_step and Adam slots
    assert not np.array_equal(before['fc0/W'], final['fc0/W'])

    with tfv1.Graph().as_default():
        resumed = RecordAtTrigger()
        trainer = train([resumed], max_epoch=1, session_init=SaverRestore(ckpt_dir))
        assert trainer.global_step == 9 and list(resumed.values) == [9]


def test_saver_restore_relaxed_skips_changed_shapes(tmp_path, log_records):
    ckpt_dir = str(tmp_path)
    record = RecordAtTrigger()
    train([ModelSaver(checkpoint_dir=ckpt_dir), record], max_epoch=1)
    saved = record.values[3]

    with tfv1.Graph().as_default():
        with pytest.raises(ValueError,
                           match=r"'fc1/W': shape \[8, 5\] in the graph, \[8, 3\] in the checkpoint"):
            init_fresh(SaverRestore(ckpt_dir), out_dim=5, extra=True)

    del log_records[:]
    with tfv1.Graph().as_default():
        before, after = init_fresh(SaverRestoreRelaxed(ckpt_dir), out_dim=5, extra=True)
    text = '\n'.join(log_records.messages())
    assert 'fc1/W (shape [8, 5] in the graph, [8, 3] in the checkpoint)' in text
    assert 'extra' in text and 'not found in the checkpoint' in text
    assert_values_equal(after, saved, ['fc0/W', 'fc0/b', 'global_step', 'fc0/W/Adam'])
    assert_values_equal(after, before, ['fc1/W', 'extra'])  # kept their initial values
    assert not np.array_equal(before['fc0/W'], after['fc0/W'])


def test_saver_restore_prefix_and_ignore(tmp_path):
    save_chkpt_vars({'fc0/W': np.full((4, 8), 3, 'float32'), 'fc0/b': np.arange(8, dtype='float32')},
                    str(tmp_path / 'part'))
    with tfv1.Graph().as_default():
        with tfv1.variable_scope('net'):
            build_regression()
        sess = NewSessionCreator().create_session()
        before = current_values(sess)
        SaverRestore(str(tmp_path / 'part'), prefix='net', ignore=['fc0/b:0']).init(sess)
        after = current_values(sess)
    assert np.all(after['net/fc0/W'] == 3)
    assert_values_equal(after, before, ['net/fc0/b', 'net/fc1/W'])


@pytest.fixture
def trained(tmp_path):
    """A checkpoint directory after one epoch, and the values it holds."""
    record = RecordAtTrigger()
    with tfv1.Graph().as_default():
        train([ModelSaver(checkpoint_dir=str(tmp_path / 'ckpt')), record], max_epoch=1)
    return str(tmp_path / 'ckpt'), record.values[3]


def test_smart_init_accepts_every_form(trained, tmp_path):
    ckpt_dir, saved = trained
    prefix = os.path.join(ckpt_dir, 'model-3')
    npz = str(tmp_path / 'params.npz')
    np.savez(npz, **{'fc0/W:0': np.full((4, 8), 2.0, 'float32')})
    for form in (prefix, prefix + '.index', ckpt_dir, os.path.join(ckpt_dir, 'checkpoint')):
        init = SmartInit(form)
        assert type(init) is SaverRestore and init.path == prefix
        assert_values_equal(init_fresh(init)[1], saved)
    assert type(SmartInit(ckpt_dir, ignore_mismatch=True)) is SaverRestoreRelaxed

    for form in (npz, {'fc0/W': np.full((4, 8), 2.0, 'float32')}):
        before, after = init_fresh(SmartInit(form))
        assert np.all(after['fc0/W'] == 2.0)
        assert_values_equal(after, before, ['fc1/W', 'global_step'])

    chain = SmartInit([ckpt_dir, {'fc1/W:0': np.ones((8, 3))}])  # float64 cast to float32
    assert isinstance(chain, ChainInit)
    after = init_fresh(chain)[1]
    assert_values_equal(after, saved, ['fc0/W', 'fc0/b', 'global_step'])
    assert after['fc1/W'].dtype == np.float32 and np.all(after['fc1/W'] == 1)

    for nothing in (None, '', []):
        assert isinstance(SmartInit(nothing), JustCurrentSession)
    existing = DictRestore({})
    assert SmartInit(existing) is existing


def test_get_model_loader(trained, tmp_path):
    ckpt_dir, saved = trained
    assert type(get_model_loader(ckpt_dir)) is SaverRestore
    npz = str(tmp_path / 'p.npz')
    np.savez(npz, **{'fc0/b:0': np.full(8, 4.0, 'float32')})
    loader = get_model_loader(npz)
    assert type(loader) is DictRestore
    assert np.all(init_fresh(loader)[1]['fc0/b'] == 4.0)


def test_dump_session_params_roundtrip(tmp_path):
    graph, sess = fresh_session()
    with graph.as_default():
        moving = tfv1.get_variable('bn/mean', initializer=np.arange(3, dtype='float32'), trainable=False,
                                   collections=[tfv1.GraphKeys.GLOBAL_VARIABLES,
                                                tfv1.GraphKeys.MODEL_VARIABLES])
        counter = tfv1.get_variable('counter', initializer=np.int32(7), trainable=False)
        sess.run([moving.initializer, counter.initializer])
        values = current_values(sess)
        path = str(tmp_path / 'dump.npz')
        with sess.as_default():
            dump_session_params(path)
        with pytest.raises(ValueError, match='npz'):
            with sess.as_default():
                dump_session_params(str(tmp_path / 'dump.npy'))
    with np.load(path) as data:
        dumped = {k: data[k] for k in data.files}
    assert sorted(dumped) == ['bn/mean:0', 'fc0/W:0', 'fc0/b:0', 'fc1/W:0']  # no step, slots, counter
    for name, value in dumped.items():
        np.testing.assert_array_equal(value, values[name[:-2]])
    assert os.listdir(str(tmp_path)) == ['dump.npz']  # no temporary file left
    with tfv1.Graph().as_default():  # the fresh model has no 'bn/mean': refused when strict
        with pytest.raises(ValueError, match=r'not variables of the graph: bn/mean\. Without strict'):
            init_fresh(SmartInit(path, strict=True))
    with tfv1.Graph().as_default():
        after = init_fresh(SmartInit(path))[1]
    assert_values_equal(after, values, ['fc0/W', 'fc0/b', 'fc1/W'])


def test_save_and_load_chkpt_vars_roundtrip(tmp_path):
    params = {'a/W:0': np.random.RandomState(0).randn(3, 2).astype('float32'),
              'b': np.arange(5, dtype='float64'), 'step': np.int64(42), 'flag': np.array(True)}
    save_chkpt_vars(params, str(tmp_path / 'sub' / 'model'))
    assert sorted(os.listdir(str(tmp_path / 'sub'))) == ['model.data-00000-of-00001', 'model.index']
    loaded = load_chkpt_vars(str(tmp_path / 'sub' / 'model'))
    assert sorted(loaded) == ['a/W', 'b', 'flag', 'step']
    for name, value in params.items():
        got = loaded[name.replace(':0', '')]
        np.testing.assert_array_equal(got, value)
        assert got.dtype == np.asarray(value).dtype
    save_chkpt_vars(params, str(tmp_path / 'p.npz'))
    with np.load(str(tmp_path / 'p.npz')) as data:
        assert sorted(data.files) == sorted(params)
        np.testing.assert_array_equal(data['a/W:0'], params['a/W:0'])


def test_session_update_checks_shapes_and_dtypes():
    graph, sess = fresh_session()
    graph.finalize()  # assignments add no op
    with graph.as_default():
        upd = SessionUpdate(sess, tfv1.global_variables())
        upd.update({'fc0/b': np.arange(8, dtype='float64'), 'fc1/W:0': np.ones((1, 8, 3), 'float32'),
                    'global_step': np.int32(9)})
        values = current_values(sess)
        assert values['fc0/b'].dtype == np.float32 and np.all(values['fc0/b'] == np.arange(8))
        assert np.all(values['fc1/W'] == 1) and values['global_step'] == 9
        with pytest.raises(ValueError, match=r"\(8, 4\) into variable 'fc1/W' of shape \(8, 3\)"):
            upd.update({'fc1/W': np.ones((8, 4), 'float32')})
        with pytest.raises(TypeError, match="'global_step' of dtype int64"):
            upd.update({'global_step': np.float32(3.5)})
        with pytest.raises(TypeError, match="do not fit"):
            upd.update({'global_step': np.uint64(2 ** 63 + 5)})
        with pytest.raises(TypeError, match="'fc0/b' overflow"):
            upd.update({'fc0/b': np.full(8, 1e300)})
        np.testing.assert_array_equal(current_values(sess)['fc0/b'], values['fc0/b'])  # unchanged
        with pytest.raises(KeyError, match='nope:0'):
            upd.update({'nope': 1})


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

def test_get_checkpoint_path_forms_and_missing(trained, tmp_path):
    ckpt_dir, _ = trained
    prefix = os.path.join(ckpt_dir, 'model-3')
    for form in (prefix, prefix + '.index', prefix + '.data-00000-of-00001', prefix + '.meta',
                 ckpt_dir, os.path.join(ckpt_dir, 'checkpoint')):
        assert get_checkpoint_path(form) == prefix
    missing_index = os.path.join(ckpt_dir, 'model-4.index')
    with pytest.raises(FileNotFoundError, match="'{}' does not exist".format(re.escape(missing_index))):
        get_checkpoint_path(os.path.join(ckpt_dir, 'model-4'))
    with pytest.raises(FileNotFoundError, match="has no 'checkpoint' state file"):
        get_checkpoint_path(str(tmp_path))
    os.remove(prefix + '.index')
    with pytest.raises(FileNotFoundError, match="points to checkpoint"):
        get_checkpoint_path(ckpt_dir)
    missing = str(tmp_path / 'nowhere' / 'model-1')
    for make in (SaverRestore, SmartInit, get_model_loader, load_chkpt_vars):
        with pytest.raises(FileNotFoundError, match='nowhere'):
            make(missing)
    with pytest.raises(FileNotFoundError, match='x.npz'):
        SmartInit(str(tmp_path / 'x.npz'))


def test_corrupt_checkpoints_fail_early_naming_the_path(trained):
    ckpt_dir, _ = trained
    prefix = os.path.join(ckpt_dir, 'model-3')
    data = prefix + '.data-00000-of-00001'
    original = open(data, 'rb').read()

    with open(data, 'wb') as f:  # truncated
        f.write(original[:len(original) // 2])
    with pytest.raises(ValueError, match="'{}' is truncated".format(re.escape(prefix))):
        SaverRestore(prefix)
    with pytest.raises(ValueError, match='truncated'):
        load_chkpt_vars(ckpt_dir)

    with open(data, 'wb') as f:  # right size, wrong bytes: caught by the checksums, before training
        f.write(bytes(b ^ 0xFF for b in original))
    init = SaverRestore(prefix)
    with tfv1.Graph().as_default():
        with pytest.raises(ValueError, match="Cannot restore checkpoint '{}'".format(re.escape(prefix))):
            init_fresh(init)
    with tfv1.Graph().as_default():
        with pytest.raises(ValueError, match="corrupt: cannot read tensor"):
            init_fresh(SaverRestoreRelaxed(prefix))

    with open(prefix + '.index', 'wb') as f:
        f.write(b'garbage' * 20)
    with pytest.raises(ValueError, match="'{}' is corrupt".format(re.escape(prefix))):
        SmartInit(ckpt_dir)


# ---------------------------------------------------------------------------------------------
# Pretrained weights with names the graph lacks (tensorpack's fine-tuning workflow)
# ---------------------------------------------------------------------------------------------

def pretrained_weights(**changed):
    """What an ImageNet classifier's file holds for the regression: the layers they share
    (with and without ':0'), a classifier the regression lacks, and training-only names."""
    weights = {'fc0/W:0': np.full((4, 8), 0.5, 'float32'), 'fc0/b': np.arange(8, dtype='float32'),
               'linear/W:0': np.ones((8, 1000), 'float32'), 'fc8/b': np.zeros(1000, 'float32'),
               'learning_rate': np.float32(0.1), 'fc0/W/Momentum:0': np.zeros((4, 8), 'float32')}
    weights.update(changed)
    return weights


# Every way to restore a dict of weights: from ``path``, an .npz file of pretrained_weights().
DICT_LOADERS = {
    'SmartInit(path)': lambda path, **kwargs: SmartInit(path, **kwargs),
    'get_model_loader(path)': lambda path, **kwargs: get_model_loader(path, **kwargs),
    'SmartInit(dict)': lambda path, **kwargs: SmartInit(dict(np.load(path)), **kwargs),
    'DictRestore(dict)': lambda path, **kwargs: DictRestore(dict(np.load(path)), **kwargs),
}


def save_npz(tmp_path, weights):
    path = str(tmp_path / 'imagenet.npz')
    np.savez(path, **weights)
    return path


@pytest.mark.parametrize('loader', list(DICT_LOADERS))
def test_weights_with_extra_names_restore_the_shared_variables_and_log_the_rest(
        loader, tmp_path, log_records):
    path = save_npz(tmp_path, pretrained_weights())
    before, after = init_fresh(DICT_LOADERS[loader](path))
    np.testing.assert_array_equal(after['fc0/W'], np.full((4, 8), 0.5))
    np.testing.assert_array_equal(after['fc0/b'], np.arange(8))
    assert_values_equal(after, before, ['fc1/W', 'global_step', 'fc0/W/Adam'])  # not in the file
    assert log_records.messages_at(logging.WARNING) == [
        'The following variables are in the graph, but not found in the dict: fc1/W',
        'The following variables are in the dict, but not found in the graph: fc8/b, linear/W']
    skipped = [m for m in log_records.messages_at(logging.INFO) if 'training-only' in m]
    assert skipped == ['DictRestore: skipping 2 training-only names of the dict the graph does not have '
                       '(global step, learning rate, optimizer slots...): fc0/W/Momentum, learning_rate']


class RecordBeforeTraining(Callback):
    def _before_train(self):
        self.values = current_values(self.trainer.sess)


def test_training_starts_from_weights_with_extra_names(tmp_path):
    record = RecordBeforeTraining()
    trainer = train([record], max_epoch=1, session_init=SmartInit(save_npz(tmp_path, pretrained_weights())))
    assert trainer.global_step == 3
    np.testing.assert_array_equal(record.values['fc0/W'], np.full((4, 8), 0.5))
    assert record.values['global_step'] == 0


@pytest.mark.parametrize('loader', list(DICT_LOADERS))
def test_strict_refuses_names_the_graph_lacks(loader, tmp_path):
    init = DICT_LOADERS[loader](save_npz(tmp_path, pretrained_weights()), strict=True)
    with tfv1.Graph().as_default():
        build_regression()
        with pytest.raises(ValueError, match=r'DictRestore\(strict=True\): 2 name\(s\) are not variables '
                                             r'of the graph: fc8/b, linear/W\.'):
            init.setup_graph()  # before any session exists
    shared_only = save_npz(tmp_path, {'fc0/b:0': np.ones(8), 'global_step': np.int64(5)})
    after = init_fresh(DICT_LOADERS[loader](shared_only, strict=True))[1]
    assert after['global_step'] == 5
    np.testing.assert_array_equal(after['fc0/b'], np.ones(8))


@pytest.mark.parametrize('loader', list(DICT_LOADERS))
def test_a_value_of_the_wrong_shape_is_an_error_naming_both_shapes(loader, tmp_path, log_records):
    path = save_npz(tmp_path, pretrained_weights(**{'fc0/b': np.zeros(9, 'float32')}))
    init = DICT_LOADERS[loader](path)
    with tfv1.Graph().as_default():
        build_regression()
        with pytest.raises(ValueError, match=r"^Cannot load an array of shape \(9,\) into variable "
                                             r"'fc0/b' of shape \(8,\)\.$"):
            init.setup_graph()
    if loader == 'get_model_loader(path)':
        return  # it has no ignore_mismatch, as in tensorpack
    del log_records[:]
    before, after = init_fresh(DICT_LOADERS[loader](path, ignore_mismatch=True))
    assert_values_equal(after, before, ['fc0/b'])
    np.testing.assert_array_equal(after['fc0/W'], np.full((4, 8), 0.5))
    assert ("Cannot load an array of shape (9,) into variable 'fc0/b' of shape (8,). It is skipped."
            in log_records.messages_at(logging.WARNING))


def test_smart_init_rejects_other_types():
    for bad in (42, 3.5, object(), b'bytes'):
        with pytest.raises(TypeError, match='SmartInit cannot initialize'):
            SmartInit(bad)
    with pytest.raises(TypeError, match=r'sess_inits\[1\]'):
        ChainInit([JustCurrentSession(), 'model-1'])
    with pytest.raises(TypeError, match='dict'):
        DictRestore([('a', 1)])
    with pytest.raises(ValueError, match='DictRestore or SmartInit'):
        SaverRestore('weights.npz')
    assert issubclass(SaverRestoreRelaxed, SessionInit)
