"""Checkpoints written in the background (checkpoint/writer.py, ModelSaver(background=True)).

Ordering is controlled, never timed: :class:`Gate` holds chosen background saves before
TensorFlow writes anything and lets each go only when something waits for it (so a save can
only complete after a wait), and records who waited, at which global step.
"""

import contextlib
import errno
import os
import threading

import numpy as np
import pytest

from helpers.breaking_session import BreakSessionAt
from helpers.callbacks import RaiseAt
from helpers.timing import HANG_TIMEOUT
from helpers.checkpoint_runs import STEPS, build_regression, train
from helpers.process_guard import starts_tensorflow_server_here
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import CheckpointWriteError, MinSaver, ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.checkpoint import files as checkpoint_files
from tensorpack_lite.checkpoint.resume_state import ResumeState
from tensorpack_lite.checkpoint.writer import BackgroundCheckpointWriter, CheckpointSaveError, host_cpu
from tensorpack_lite.tfutils.common import get_global_step_var
from tensorpack_lite.multiprocess.server import create_server
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train.base import Trainer
from tensorpack_lite.cluster.config import local_cluster

pytestmark = starts_tensorflow_server_here   # servers made in this process


def values(sess):
    variables = tfv1.global_variables()
    return {v.op.name: value for v, value in zip(variables, sess.run(variables))}


def checkpoint_values(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def listed(directory):
    state = tfv1.train.get_checkpoint_state(directory)
    return [os.path.basename(p) for p in state.all_model_checkpoint_paths] if state else []


def files_of(directory, step):
    return sorted(f for f in os.listdir(directory) if f.startswith('model-{}.'.format(step)))


def complete_files(step):
    return ['model-{}.data-00000-of-00001'.format(step), 'model-{}.index'.format(step),
            'model-{}.resume'.format(step)]


class Record(Callback):
    """The global variables at every trigger and step, and what ``check(step)`` says then."""

    def __init__(self, check=None):
        self.at_trigger, self.at_step, self.checks = {}, {}, {}
        self._check = check

    def _trigger(self):
        self.at_trigger[self.global_step] = values(self.trainer.sess)

    def _trigger_step(self):
        self.at_step[self.global_step] = values(self.trainer.sess)
        if self._check is not None:
            self.checks[self.global_step] = self._check()


class Gate:
    """Background saves of ``steps`` wait, before TensorFlow writes anything, until someone
    waits for them (a trigger, ``wait()``, the end of training) or :meth:`open` is called;
    ``failing`` steps then write a partial data file and raise ENOSPC. ``waits`` records
    ``(checkpoint in flight, global step)`` at every wait for one of them."""

    def __init__(self, monkeypatch, steps=(), failing=(), step_of=lambda: None):
        self.release = {step: threading.Event() for step in list(steps) + list(failing)}
        self.failing, self.waits, self.saved = set(failing), [], []
        real_save, real_wait = tfv1.train.Saver.save, BackgroundCheckpointWriter.wait

        def save(saver, sess, save_path, global_step=None, **kwargs):
            gated = threading.current_thread().name == 'BackgroundCheckpointWriter'
            if gated and global_step in self.release:
                assert self.release[global_step].wait(HANG_TIMEOUT)
                if global_step in self.failing:
                    with open('{}-{}.data-00000-of-00001'.format(save_path, global_step), 'wb') as f:
                        f.write(b'partial')
                    raise OSError(errno.ENOSPC, 'No space left on device (simulated)')
            self.saved.append(global_step)
            return real_save(saver, sess, save_path, global_step=global_step, **kwargs)

        def wait(writer):
            target = writer.in_flight
            if target is not None and int(target.rsplit('-', 1)[1]) in self.release:
                self.waits.append((os.path.basename(target), step_of()))
                self.open()
            return real_wait(writer)

        monkeypatch.setattr(tfv1.train.Saver, 'save', save)
        monkeypatch.setattr(BackgroundCheckpointWriter, 'wait', wait)

    def open(self):
        for event in self.release.values():
            event.set()


def writer_threads():
    return [t for t in threading.enumerate() if t.name == 'BackgroundCheckpointWriter']


# ----- ModelSaver -------------------------------------------------------------------------------

def test_a_checkpoint_holds_its_trigger_steps_values_while_training_goes_on(logdir, monkeypatch):
    """model-3 is held back until the next trigger (step 6) waits for it: steps 4-6 run while it
    is not written, and it restores to the values of step 3, not of any later step."""
    trainer = Trainer()
    gate = Gate(monkeypatch, steps=[3], step_of=lambda: trainer.loop.global_step)
    record = Record(check=lambda: files_of(logdir, 3))
    trainer.train_op = build_regression()
    trainer.train([ModelSaver(), record], [], NewSessionCreator(), JustCurrentSession(), STEPS, 1, 3)

    assert gate.waits == [('model-3', 6)]          # the trigger of step 6 waited for model-3
    assert [record.checks[s] for s in (4, 5, 6)] == [[], [], []]   # not written while steps 4-6 ran
    saved = checkpoint_values(os.path.join(logdir, 'model-3'))
    assert sorted(saved) == sorted(record.at_trigger[3])
    for name, value in record.at_trigger[3].items():
        np.testing.assert_array_equal(saved[name], value, err_msg=name)
    for step in (4, 5, 6):
        assert not np.array_equal(saved['fc0/W'], record.at_step[step]['fc0/W'])
    assert listed(logdir) == ['model-3', 'model-6', 'model-9']
    for step in (3, 6, 9):
        assert files_of(logdir, step) == complete_files(step)
    state = ResumeState.read(os.path.join(logdir, 'model-3'))
    assert (state.epoch, state.steps_done, state.global_step) == (1, STEPS, 3)


def test_the_save_in_flight_when_training_ends_is_finished_and_listed(logdir, monkeypatch):
    """model-9 (the last step) is held back until the end of training waits for it."""
    trainer = Trainer()
    gate = Gate(monkeypatch, steps=[9], step_of=lambda: trainer.loop.global_step)
    trainer.train_op = build_regression()
    trainer.train([ModelSaver()], [], NewSessionCreator(), JustCurrentSession(), STEPS, 1, 3)
    assert gate.waits == [('model-9', 9)]
    assert listed(logdir) == ['model-3', 'model-6', 'model-9']
    assert files_of(logdir, 9) == complete_files(9)
    assert not writer_threads()


@pytest.mark.parametrize('error', [RuntimeError('simulated failure'), KeyboardInterrupt()])
def test_after_an_error_the_save_in_flight_and_the_final_one_complete(logdir, monkeypatch, error):
    """An error (or Ctrl-C) at step 5 while model-3 is written: the end of training finishes
    model-3, then writes model-5."""
    trainer = Trainer()
    Gate(monkeypatch, steps=[3], step_of=lambda: trainer.loop.global_step)
    trainer.train_op = build_regression()
    with pytest.raises(type(error)):
        trainer.train([ModelSaver(), RaiseAt(5, error)], [], NewSessionCreator(), JustCurrentSession(),
                      STEPS, 1, 3)
    assert listed(logdir) == ['model-3', 'model-5']
    assert files_of(logdir, 3) == complete_files(3)
    assert files_of(logdir, 5)[:2] == complete_files(5)[:2]


def test_a_save_in_flight_is_discarded_when_the_session_is_unusable(logdir, monkeypatch, log_records):
    """The 5th step breaks the session (every later run waits: helpers.BreakingSession) while
    model-3 is still being written: it is discarded, not completed from a session in an unknown
    state."""
    trainer = Trainer()
    trainer.SESSION_PROBE_TIMEOUT = 1.0     # the broken session never answers: any bound shows it
    gate = Gate(monkeypatch, steps=[3], step_of=lambda: trainer.loop.global_step)
    trainer.train_op = build_regression()
    breaker = BreakSessionAt(5)
    try:
        with pytest.raises(IndexError):
            trainer.train([breaker, ModelSaver()], [], NewSessionCreator(), JustCurrentSession(), STEPS, 1, 3)
        assert not trainer.loop.session_usable
        assert gate.waits == []       # nobody waited: training returned with model-3 still held back
        assert any('model-3, still being written, is discarded' in m for m in log_records.messages())
    finally:
        breaker.session.release.set()   # the session's blocked runs end (with an error)
    gate.open()                   # the write goes on, and its thread removes what it wrote
    for thread in writer_threads():
        thread.join(HANG_TIMEOUT)
    assert not any(thread.is_alive() for thread in writer_threads())
    assert files_of(logdir, 3) == [] and listed(logdir) == []


def test_a_failed_background_write_stops_training_naming_the_checkpoint(logdir, monkeypatch):
    """model-3's write fails in the background: the trigger of step 6 raises it; its partial
    files are gone, it is not listed, and the end of training does not try again."""
    trainer = Trainer()
    gate = Gate(monkeypatch, failing=[3], step_of=lambda: trainer.loop.global_step)
    trainer.train_op = build_regression()
    with pytest.raises(CheckpointWriteError) as info:
        trainer.train([ModelSaver()], [], NewSessionCreator(), JustCurrentSession(), STEPS, 1, 3)
    assert os.path.join(logdir, 'model-3') in str(info.value)
    assert 'No space left on device (simulated)' in str(info.value)
    assert isinstance(info.value.__cause__, OSError)
    assert trainer.loop.global_step == 6 and gate.waits == [('model-3', 6)]
    assert gate.saved == []       # nothing written after it: not model-6, not a final one
    assert [f for f in os.listdir(logdir) if f.startswith('model-')] == [] and listed(logdir) == []


def test_a_failed_resume_state_write_removes_the_checkpoint(logdir, monkeypatch):
    """The model files are complete, then writing model-3.resume fails: the next trigger
    raises it, and no file of model-3 is left."""
    real_write = ResumeState.write

    def write(state, prefix, owner=None):
        if prefix.endswith('model-3'):
            raise OSError(errno.EROFS, 'Read-only file system (simulated)')
        return real_write(state, prefix, owner)

    monkeypatch.setattr(ResumeState, 'write', write)
    with pytest.raises(CheckpointWriteError, match=r'checkpoint .*model-3 \(OSError: .*Read-only'):
        train([ModelSaver()])
    assert files_of(logdir, 3) == [] and listed(logdir) == []


def test_rotation_removes_resume_files_with_their_checkpoints(logdir):
    from tensorpack_lite.callbacks.trigger import PeriodicTrigger
    train([PeriodicTrigger(ModelSaver(max_to_keep=1), every_k_steps=1, every_k_epochs=None)], max_epoch=4)
    names = [f for f in os.listdir(logdir) if f.startswith('model-')]
    prefixes = {n.split('.')[0] for n in names}
    # kept: the two newest epoch ends (protected) and the newest one
    assert sorted(prefixes) == ['model-12', 'model-9']
    assert sorted(names) == complete_files(12) + complete_files(9)


def test_background_and_synchronous_checkpoints_hold_the_same_variables(tmp_path):
    written = {}
    for background in (False, True):
        directory = str(tmp_path / str(background))
        with tfv1.Graph().as_default():
            train([ModelSaver(checkpoint_dir=directory, background=background)], max_epoch=2)
        prefix = os.path.join(directory, 'model-6')
        written[background] = (tf.train.list_variables(prefix), checkpoint_values(prefix),
                               ResumeState.read(prefix).as_dict(), listed(directory))
    (names, saved, state, kept), (bg_names, bg_saved, bg_state, bg_kept) = written[False], written[True]
    assert names == bg_names and state == bg_state and kept == bg_kept == ['model-3', 'model-6']
    for name in saved:
        assert saved[name].dtype == bg_saved[name].dtype
        np.testing.assert_array_equal(saved[name], bg_saved[name], err_msg=name)


def test_min_saver_copies_the_checkpoint_of_its_trigger(logdir, monkeypatch):
    """MinSaver runs right after ModelSaver: it waits for the checkpoint in flight instead of
    copying the previous one."""
    class PutError(Callback):
        def _trigger(self):
            self.trainer.monitors.put_scalar('err', 10.0 - self.global_step)

    trainer = Trainer()
    gate = Gate(monkeypatch, steps=[3, 6, 9], step_of=lambda: trainer.loop.global_step)
    trainer.train_op = build_regression()
    min_saver = MinSaver('err')
    trainer.train([ModelSaver(), PutError(), min_saver], [], NewSessionCreator(), JustCurrentSession(),
                  STEPS, 1, 3)
    assert gate.waits == [('model-3', 3), ('model-6', 6), ('model-9', 9)]
    assert min_saver.best == (9, 1.0)
    assert int(checkpoint_values(os.path.join(logdir, 'min-err'))['global_step']) == 9


# ----- the writer -------------------------------------------------------------------------------

def writer_graph(companions=None):
    """Variables (a resource one, a reference one, the global step), their writer and an update."""
    a = tfv1.get_variable('a', initializer=np.arange(6, dtype='float32').reshape(2, 3))
    b = tfv1.Variable(np.ones(3, 'float32'), name='b', use_resource=False)
    step = get_global_step_var()
    writer = BackgroundCheckpointWriter(tfv1.global_variables(), device=host_cpu(step.device),
                                        companions=companions)
    update = tf.group(a.assign_add(tf.ones_like(a)), tfv1.assign_add(b, tf.ones_like(b)),
                      tfv1.assign_add(step, 1))
    return writer, update


@contextlib.contextmanager
def saving(writer, prefix, done=lambda path: None):
    """A session in which ``writer`` copied the initial values and started to save them as
    ``<prefix>-1``."""
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        writer.copy(sess)
        writer.start_save(sess, prefix, 1, done)
        yield sess


def test_the_shadows_are_in_no_standard_collection_and_need_no_initializer(tmp_path):
    writer, update = writer_graph()
    assert [v.op.name for v in tfv1.global_variables()] == ['a', 'b', 'global_step']
    assert tfv1.local_variables() == [] and [v.op.name for v in tfv1.trainable_variables()] == ['a', 'b']
    assert tfv1.get_collection(BackgroundCheckpointWriter.COLLECTION) == writer.shadows
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        assert list(sess.run(tfv1.report_uninitialized_variables())) == []
        sess.run(update)
        writer.copy(sess)
        expected = values(sess)
        sess.run(update)                 # the copy is a copy: a reference variable updated in place too
        done = []
        writer.start_save(sess, str(tmp_path / 'model'), 1, done.append)
        writer.close()
    assert done == [str(tmp_path / 'model-1')]
    saved = checkpoint_values(done[0])
    assert sorted(saved) == ['a', 'b', 'global_step']
    for name, value in expected.items():
        np.testing.assert_array_equal(saved[name], value, err_msg=name)


def test_at_most_one_save_is_in_flight(tmp_path, monkeypatch):
    """The second copy waits for the first save: it is only released by that wait, and the
    copy runs after the first checkpoint is complete, which holds the first copy's values."""
    writer, update = writer_graph()
    gate = Gate(monkeypatch, steps=[1])
    order = []
    with saving(writer, str(tmp_path / 'model'), lambda path: order.append('done')) as sess:
        first = values(sess)
        assert writer.in_flight == str(tmp_path / 'model-1')
        sess.run(update)

        class RecordingSession:
            def run(self, fetches):
                order.append('copy')
                return sess.run(fetches)

        writer.copy(RecordingSession())
        assert gate.waits == [('model-1', None)] and order == ['done', 'copy'] and writer.in_flight is None
        writer.start_save(sess, str(tmp_path / 'model'), 2, order.append)
        writer.close()
    for name, value in first.items():
        np.testing.assert_array_equal(checkpoint_values(str(tmp_path / 'model-1'))[name], value)
    assert int(checkpoint_values(str(tmp_path / 'model-2'))['global_step']) == 1


def test_close_without_finishing_discards_the_save_and_done_never_runs(tmp_path, monkeypatch):
    writer, _ = writer_graph()
    gate = Gate(monkeypatch, steps=[1])
    done = []
    with saving(writer, str(tmp_path / 'model'), done.append):
        assert writer.close(finish=False) == str(tmp_path / 'model-1')
        assert writer.in_flight is None
        gate.open()
        for thread in writer_threads():
            thread.join(HANG_TIMEOUT)
    assert done == [] and os.listdir(str(tmp_path)) == []


def test_an_error_in_the_background_is_raised_by_the_next_call_and_removes_the_files(tmp_path, monkeypatch):
    writer, _ = writer_graph(companions=lambda prefix: [prefix + '.extra'])
    Gate(monkeypatch, failing=[1])
    with saving(writer, str(tmp_path / 'model')) as sess:
        open(str(tmp_path / 'model-1.extra'), 'w').close()
        with pytest.raises(CheckpointSaveError, match=r'model-1 \(OSError: .*No space left') as info:
            writer.copy(sess)
        assert info.value.prefix == str(tmp_path / 'model-1') and isinstance(info.value.__cause__, OSError)
        writer.close()                   # raised once
    assert os.listdir(str(tmp_path)) == []


def test_a_write_into_a_directory_that_is_gone_is_an_error_not_a_silent_loss(tmp_path):
    writer, _ = writer_graph()
    with saving(writer, str(tmp_path / 'gone' / 'deeper' / 'model')):
        with pytest.raises(CheckpointSaveError, match=r'gone/deeper/model-1 \(\w+'):
            writer.wait()


def test_a_failed_write_keeps_an_earlier_checkpoint_it_did_not_touch(tmp_path, monkeypatch):
    writer, _ = writer_graph()
    with saving(writer, str(tmp_path / 'model')) as sess:
        writer.wait()
        before = {f: open(str(tmp_path / f), 'rb').read() for f in os.listdir(str(tmp_path))}

        def fails(*args, **kwargs):
            raise OSError(errno.ENOSPC, 'full')

        monkeypatch.setattr(tfv1.train.Saver, 'save', fails)
        writer.start_save(sess, str(tmp_path / 'model'), 1, lambda path: None)
        with pytest.raises(CheckpointSaveError):
            writer.wait()
    assert {f: open(str(tmp_path / f), 'rb').read() for f in os.listdir(str(tmp_path))} == before


def test_temporaries_of_a_cut_write_are_never_an_index(tmp_path):
    """What TensorFlow leaves when a write is cut short (temporary data and index files, a
    sharded saver's directory) is removed; another checkpoint's files are not."""
    names = ['model-1.data-00000-of-00001.tempstate123', 'model-1.index.tempstate456', 'model-10.index',
             'model-1.data-00000-of-00001', 'model-1.resume']
    for name in names:
        open(str(tmp_path / name), 'w').close()
    os.makedirs(str(tmp_path / 'model-1_temp'))
    checkpoint_files.remove_checkpoint(str(tmp_path / 'model-1'), temporaries_only=True)
    assert sorted(os.listdir(str(tmp_path))) == ['model-1.data-00000-of-00001', 'model-1.resume',
                                                 'model-10.index']
    checkpoint_files.remove_checkpoint(str(tmp_path / 'model-1'), [str(tmp_path / 'model-1.resume')])
    assert os.listdir(str(tmp_path)) == ['model-10.index']


def test_host_cpu():
    assert host_cpu('') == '/device:CPU:0'
    assert host_cpu('/job:worker/task:1/device:GPU:0') == '/job:worker/task:1/device:CPU:0'
    assert host_cpu('/job:ps/task:0/device:CPU:0') == '/job:ps/task:0/device:CPU:0'


def test_in_a_parameter_server_graph_the_shadows_live_on_the_worker(tmp_path):
    """Variables on a parameter server (another task of the cluster, in this process), the
    global step on the worker, as the parameter-server trainers place them: the shadows and
    the save are on the worker, and the checkpoint holds the parameter server's values."""
    cluster = local_cluster(1, 1)
    worker = create_server(cluster, 'worker', 0)
    create_server(cluster, 'ps', 0)
    worker_cpu, ps_cpu = '/job:worker/task:0/device:CPU:0', '/job:ps/task:0/device:CPU:0'
    with tf.device(ps_cpu):
        w = tfv1.get_variable('w', initializer=np.arange(4, dtype='float32'))
    with tf.device(worker_cpu):
        step = get_global_step_var()
    writer = BackgroundCheckpointWriter([w, step], device=host_cpu(step.device))
    assert [s.device for s in writer.shadows] == [worker_cpu, worker_cpu]
    saves = [op for op in tfv1.get_default_graph().get_operations() if op.type == 'SaveV2']
    assert [op.device for op in saves if op.name.startswith('background_checkpoint')] == [worker_cpu]
    with tfv1.Session(worker.target) as sess:
        sess.run(tfv1.global_variables_initializer())
        sess.run(w.assign_add(tf.ones(4)))
        writer.copy(sess)
        writer.start_save(sess, str(tmp_path / 'model'), 7, lambda path: None)
        writer.close()
    saved = checkpoint_values(str(tmp_path / 'model-7'))
    np.testing.assert_array_equal(saved['w'], np.arange(4) + 1)
