"""What TensorBoard shows: one point per scalar and global step in the event files, the value a
hyper-parameter had during the epoch's steps, and the same numbers in stats.json and the
monitors' history (issue 15)."""

import glob
import json
import os

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.monitors.writers import JSONWriter, TFEventWriter
from tensorpack_lite.callbacks.param_setter import ScheduledHyperParamSetter
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow.raw import DataFromList
from tensorpack_lite.graph_builder.model_desc import ModelDesc
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train.base import Trainer
from tensorpack_lite.train.config import TrainConfig
from tensorpack_lite.train.interface import launch_train_with_config
from tensorpack_lite.train.trainers import SimpleTrainer

STEPS = 2
INITIAL_LR = 0.1
# (epoch, value): the value is set after that epoch, so epochs 1, 2, 3 run with 0.1, 0.05, 0.01
SCHEDULE = [(1, 0.05), (2, 0.01)]
LR_PER_EPOCH = [0.1, 0.05, 0.01]


def _events(logdir):
    events = []
    for fname in sorted(glob.glob(os.path.join(logdir, 'events.out.tfevents.*'))):
        events += list(tfv1.train.summary_iterator(fname))
    return events


def _scalar_points(logdir, tag):
    return [(event.step, value.simple_value) for event in _events(logdir)
            for value in event.summary.value if value.tag == tag]


def _stats(logdir):
    with open(os.path.join(logdir, 'stats.json')) as f:
        return json.load(f)


class LinearModel(ModelDesc):
    """cost = w * mean(x) with x all ones: the gradient is 1, so each SGD step lowers w by
    the learning rate. The model summarizes its learning rate as tensorpack examples do: the
    monitors drop the '-summary' suffix, so the tag is 'learning_rate', the name the
    ScheduledHyperParamSetter puts. (A summary named 'learning_rate' itself would get the tag
    'learning_rate_1' from TensorFlow, the variable holding that op name.)"""

    def inputs(self):
        return [tf.TensorSpec([None], tf.float32, 'x')]

    def build_graph(self, x):
        w = tfv1.get_variable('w', initializer=0.0)
        return tf.identity(w * tf.reduce_mean(x), name='cost')

    def optimizer(self):
        lr = tfv1.get_variable('learning_rate', initializer=INITIAL_LR, trainable=False)
        tfv1.summary.scalar('learning_rate-summary', lr)
        return tfv1.train.GradientDescentOptimizer(lr)


class RecordW(Callback):
    """The value of variable ``w`` at the end of every epoch (before the other epoch triggers)."""

    def __init__(self):
        self.values = []

    def _setup_graph(self):
        self._w = [v for v in tfv1.global_variables() if v.op.name == 'w'][0]

    def _trigger_epoch(self):
        self.values.append(float(self.trainer.sess.run(self._w)))


@pytest.fixture
def scheduled_run(logdir):
    """3 epochs of LinearModel with a learning rate schedule and the default monitors."""
    record_w = RecordW()
    config = TrainConfig(
        model=LinearModel(),
        dataflow=DataFromList([[np.ones(2, 'float32')]] * STEPS, shuffle=False),
        callbacks=[record_w, ScheduledHyperParamSetter('learning_rate', SCHEDULE)],
        steps_per_epoch=STEPS, max_epoch=3)
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    return trainer, record_w.values


def test_one_learning_rate_point_per_epoch_with_the_epochs_value(logdir, scheduled_run):
    trainer, w_values = scheduled_run
    # w falls by the learning rate at every step: what each epoch actually ran with
    decrements = -np.diff([0.0] + w_values) / STEPS
    assert decrements == pytest.approx(LR_PER_EPOCH, rel=1e-5)

    tags = {value.tag for event in _events(logdir) for value in event.summary.value}
    assert {tag for tag in tags if 'learning' in tag} == {'learning_rate'}
    points = _scalar_points(logdir, 'learning_rate')
    assert [step for step, _ in points] == [2, 4, 6]
    assert [value for _, value in points] == pytest.approx(LR_PER_EPOCH, rel=1e-6)


def test_stats_json_and_history_agree_with_the_event_files(logdir, scheduled_run):
    trainer, _ = scheduled_run
    stats = _stats(logdir)
    assert [s['global_step'] for s in stats] == [2, 4, 6]
    assert [s['learning_rate'] for s in stats] == pytest.approx(LR_PER_EPOCH, rel=1e-6)
    history = trainer.monitors.get_history('learning_rate')
    assert [step for step, _ in history] == [2, 4, 6]
    assert [value for _, value in history] == pytest.approx(LR_PER_EPOCH, rel=1e-6)


# ------------------------------------------------------------- the rule: last value per step


class PutTwice(Callback):
    """Puts 'twice' at every step (step * 10), then again at the end of every epoch (-step):
    two values at each epoch's last step; 'hist' is a histogram summary at every step."""

    def _trigger_step(self):
        self.trainer.monitors.put_scalar('twice', self.global_step * 10.0)
        summary = tfv1.Summary()
        summary.value.add(tag='hist').histo.num = self.global_step
        self.trainer.monitors.put_summary(summary)

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar('twice', -float(self.global_step))


def _train_one_variable(callbacks, monitors, max_epoch):
    with tfv1.Graph().as_default():
        w = tfv1.get_variable('w', initializer=0.0)
        trainer = Trainer()
        trainer.train_op = tfv1.train.GradientDescentOptimizer(0.1).minimize(tf.square(w - 1.0))
        trainer.train(callbacks, monitors, NewSessionCreator(), JustCurrentSession(),
                      STEPS, 1, max_epoch)
    return trainer


def test_the_last_value_put_at_a_step_is_the_one_kept(logdir):
    trainer = _train_one_variable([PutTwice()], [TFEventWriter(), JSONWriter()], max_epoch=2)
    # steps 1 and 3 have one value; 2 and 4 (an epoch's last step) keep the epoch's -step
    expected = [(1, 10.0), (2, -2.0), (3, 30.0), (4, -4.0)]
    assert _scalar_points(logdir, 'twice') == expected
    assert trainer.monitors.get_history('twice') == expected
    # stats.json has a record after each step that put scalars, and one per epoch
    assert [(s['global_step'], s['twice']) for s in _stats(logdir)] == expected


def test_non_scalar_summaries_are_all_written(logdir):
    _train_one_variable([PutTwice()], [TFEventWriter()], max_epoch=2)
    histograms = [(event.step, value.histo.num) for event in _events(logdir)
                  for value in event.summary.value if value.tag == 'hist']
    assert sorted(histograms) == [(1, 1), (2, 2), (3, 3), (4, 4)]
