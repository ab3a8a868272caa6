"""Elastic policies (``TrainConfig(elastic=...)``, tensorpack_lite/train/elastic.py) in one
process, where a change of world size is a change of towers (virtual CPU devices): keeping the
global batch over 4, 3, 2, then 4 towers ends at the weights of an uninterrupted run; scaling
the learning rate makes the updates of the scaled rate and keeps an epoch's data, and the resume
finds epochs whose steps per epoch changed; bad sizes and inputs are refused naming the numbers.
(Real processes: distributed/test_elastic.py.)"""

import functools
import json
import logging
import os
import sys

import numpy as np
import pytest

from tensorpack_lite.callbacks import ModelSaver, ScheduledHyperParamSetter
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import (AutoResumeTrainConfig, SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                                   TrainConfig, launch_train_with_config)
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train.base import Trainer
from tensorpack_lite.checkpoint.resume_point import RunShape
from tensorpack_lite.train.elastic import KeepGlobalBatch, NoAdjustment, ScaleLearningRate
from tensorpack_lite.utils import stats_json

from helpers.models import LineRegression
from helpers.mpi import starts_mpi_here

W0 = np.linspace(-1, 1, 4).reshape(4, 1).astype('float32')


def linear(lr=0.05, momentum=0.9, rate_variable=True):
    """y ~ x @ w from W0, mean squared error; the rate in a variable 'learning_rate' (or a float)."""
    optimizer = (functools.partial(tfv1.train.MomentumOptimizer, momentum=momentum) if momentum
                 else tfv1.train.GradientDescentOptimizer)
    return LineRegression(dim=4, init=W0, lr=lr, lr_variable=rate_variable, optimizer=optimizer)


def samples(num):
    rng = np.random.RandomState(0)
    x = rng.randn(num, 4).astype('float32')
    y = (x @ rng.randn(4)).astype('float32')
    return x, y


def train(towers, batch, max_epoch, policy, steps_per_epoch, num=48, model=None, saver=None, data=None):
    """Resume (or start) the run in the logger directory with ``towers`` towers of ``batch``
    datapoints each (of the DataFlow ``data``, by default :func:`samples` in order); returns
    the config."""
    x, y = samples(num)
    with tfv1.Graph().as_default():
        trainer = (SyncMultiGPUTrainerParameterServer(['/cpu:{}'.format(i) for i in range(towers)])
                   if towers > 1 else SimpleTrainer())
        config = AutoResumeTrainConfig(
            model=model or linear(),
            dataflow=BatchData(data or DataFromList(list(zip(x, y)), shuffle=False), batch),
            callbacks=[saver or ModelSaver()], monitors=None, steps_per_epoch=steps_per_epoch,
            max_epoch=max_epoch, elastic=policy,
            session_config=tfv1.ConfigProto(device_count={'CPU': towers}))
        launch_train_with_config(config, trainer)
        return config


def newest_weights(logdir):
    return tfv1.train.load_variable(tfv1.train.latest_checkpoint(logdir), 'w')


def stats(logdir):
    with open(os.path.join(logdir, 'stats.json')) as f:
        return [(r['epoch_num'], r['global_step'], r['world_size'], r['global_batch'], r['steps_per_epoch'])
                for r in json.load(f)]


def resize_warnings(log_records):
    return [m for m in log_records.messages_at(logging.WARNING) if m.startswith('Resuming at epoch')]


def test_keeping_the_global_batch_over_4_3_2_4_towers_ends_at_the_uninterrupted_weights(
        logdir, tmp_path, log_records):
    policy = KeepGlobalBatch(12)
    for epochs, towers in enumerate([4, 3, 2, 4], start=1):
        train(towers, policy.per_replica_batch(towers), epochs, policy, steps_per_epoch=4)
    elastic = newest_weights(logdir)
    assert stats(logdir) == [(1, 4, 4, 12, 4), (2, 8, 3, 12, 4), (3, 12, 2, 12, 4), (4, 16, 4, 12, 4)]
    assert resize_warnings(log_records) == [
        "Resuming at epoch {} with {} model replicas (towers x processes), where epoch {} ended with {}: "
        "KeepGlobalBatch(12) keeps the global batch at 12 ({} per replica, was {} per replica); an epoch "
        "stays 4 steps and the learning rate is unchanged.".format(e, n, e - 1, m, 12 // n, 12 // m)
        for e, n, m in [(2, 3, 4), (3, 2, 3), (4, 4, 2)]]

    from tensorpack_lite.utils import logger
    logger.set_logger_dir(str(tmp_path / 'whole'), action='d')
    train(4, 3, 4, policy, steps_per_epoch=4)
    whole = newest_weights(str(tmp_path / 'whole'))
    assert np.abs(whole - W0).max() > 0.1       # it trained
    np.testing.assert_allclose(elastic, whole, rtol=0, atol=1e-5)


def sgd(w, x, y, lr, batch, steps):
    """``steps`` plain gradient steps of the mean squared error on consecutive batches."""
    for k in range(steps):
        xb, yb = x[k * batch:(k + 1) * batch].astype('float64'), y[k * batch:(k + 1) * batch]
        grad = 2.0 / batch * xb.T @ (xb @ w - yb[:, None])
        w = w - lr * grad
    return w


def test_scaling_the_learning_rate_2_1_2_towers_makes_the_scaled_updates_and_keeps_an_epochs_data(
        logdir, log_records):
    """SGD at 0.1 meant for 2 replicas of 4 datapoints; 16 datapoints an epoch. Epoch 1 on 2
    towers (2 steps), epoch 2 on 1 tower (4 steps at 0.05), epoch 3 on 2 towers again: the
    epoch-2 checkpoint (global step 6) is found as the end of epoch 2 although 6 is 3 epochs of
    2 steps."""
    policy = ScaleLearningRate(2)
    x, y = samples(16)
    train(2, 4, 1, policy, steps_per_epoch=2, num=16, model=linear(lr=0.1, momentum=0))
    w1 = newest_weights(logdir)
    np.testing.assert_allclose(w1, sgd(W0.astype('float64'), x, y, 0.1, 8, 2), rtol=0, atol=1e-5)
    config = train(1, 4, 2, policy, steps_per_epoch=2, num=16, model=linear(lr=0.1, momentum=0))
    assert config.steps_per_epoch == 4
    w2 = newest_weights(logdir)
    np.testing.assert_allclose(w2, sgd(w1.astype('float64'), x, y, 0.05, 4, 4), rtol=0, atol=1e-5)
    rate = tfv1.train.load_variable(tfv1.train.latest_checkpoint(logdir), 'learning_rate')
    assert rate == pytest.approx(0.1)      # the variable keeps the reference rate
    config = train(2, 4, 3, policy, steps_per_epoch=4, num=16, model=linear(lr=0.1, momentum=0))
    assert config.steps_per_epoch == 2
    np.testing.assert_allclose(newest_weights(logdir), sgd(w2.astype('float64'), x, y, 0.1, 8, 2), rtol=0,
                               atol=1e-5)
    assert stats(logdir) == [(1, 2, 2, 8, 2), (2, 6, 1, 4, 4), (3, 8, 2, 8, 2)]
    assert "Resuming from checkpoint {} (end of epoch 2).".format(os.path.join(logdir, 'model-6')) in \
        log_records.messages_at(logging.INFO)
    assert resize_warnings(log_records) == [
        "Resuming at epoch 2 with 1 model replicas (towers x processes), where epoch 1 ended with 2: "
        "ScaleLearningRate(2) keeps each replica's batch; the learning rate is 'learning_rate' x 1/2 "
        "(was x 1) and an epoch is 4 steps (was 2), the same data.",
        "Resuming at epoch 3 with 2 model replicas (towers x processes), where epoch 2 ended with 1: "
        "ScaleLearningRate(2) keeps each replica's batch; the learning rate is 'learning_rate' x 1 "
        "(was x 1/2) and an epoch is 2 steps (was 4), the same data."]


@pytest.mark.parametrize('kind', ['simple', pytest.param('horovod', marks=starts_mpi_here)])
def test_a_schedule_written_for_the_reference_size_is_scaled_at_every_epoch(logdir, kind, monkeypatch):
    """ScaleLearningRate with a ScheduledHyperParamSetter: the schedule (0.1 for epoch 1, 0.04
    from epoch 2: as in tensorpack, (e, v) sets v after epoch e) is written once, for the
    reference size, and sets the variable; every update uses it x N / reference: 1/2 on a
    SimpleTrainer (1 replica, reference 2) and on a HorovodTrainer (2 towers on one MPI rank,
    reference 4)."""
    x, y = samples(16)
    if kind == 'horovod':
        pytest.importorskip('mpi4py', reason='the MPI engine needs mpi4py: '
                                             'pip install "tensorpack_lite[mpi]"')
        from tensorpack_lite.train.horovod_trainer import HorovodTrainer
        monkeypatch.setitem(sys.modules, 'horovod', None)            # the MPI engine, on every TensorFlow
        monkeypatch.setitem(sys.modules, 'horovod.tensorflow', None)
        trainer, policy, batch = HorovodTrainer(gpus=['/cpu:0', '/cpu:1']), ScaleLearningRate(4), 2
    else:
        trainer, policy, batch = SimpleTrainer(), ScaleLearningRate(2), 4
    schedule = ScheduledHyperParamSetter('learning_rate', [(0, 0.1), (1, 0.04)])
    config = TrainConfig(model=linear(lr=0.5, momentum=0), callbacks=[schedule, ModelSaver()], monitors=None,
                         dataflow=BatchData(DataFromList(list(zip(x, y)), shuffle=False), batch),
                         steps_per_epoch=2, max_epoch=2, elastic=policy,
                         session_config=tfv1.ConfigProto(device_count={'CPU': 2}))
    launch_train_with_config(config, trainer)
    assert trainer.world_size == (2 if kind == 'horovod' else 1)
    w1 = sgd(W0.astype('float64'), x[:8], y[:8], 0.05, 4, 2)         # 0.1 x 1/2, two steps of 4 datapoints
    expected = sgd(w1, x[8:], y[8:], 0.02, 4, 2)                       # 0.04 x 1/2
    np.testing.assert_allclose(newest_weights(logdir), expected, rtol=0, atol=1e-5)
    checkpoint = tfv1.train.latest_checkpoint(logdir)
    assert tfv1.train.load_variable(checkpoint, 'learning_rate') == pytest.approx(0.04)
    assert [record['learning_rate'] for record in json.load(open(os.path.join(logdir, 'stats.json')))] == \
        pytest.approx([0.1, 0.04])                                     # what the schedule set, as written


def test_a_later_resume_with_the_same_size_keeps_the_scaled_steps_per_epoch(logdir, log_records):
    """After 2 -> 1 towers (2 -> 4 steps an epoch), a resume with 1 tower again keeps 4 steps
    although the config says 2 (the steps of the reference size)."""
    for towers, epochs in [(2, 1), (1, 2), (1, 3)]:
        config = train(towers, 4, epochs, ScaleLearningRate(2), steps_per_epoch=2, num=16,
                       model=linear(lr=0.1, momentum=0))
    assert config.steps_per_epoch == 4
    assert [record[4] for record in stats(logdir)] == [2, 4, 4]
    assert len(resize_warnings(log_records)) == 1
    assert "ScaleLearningRate(2): an epoch stays 4 steps, as the epoch resumed from (the config says 2)." in \
        log_records.messages_at(logging.INFO)


def test_the_saver_keeps_epoch_ends_that_are_not_multiples_of_the_new_steps_per_epoch(logdir):
    """After 2 -> 1 towers with ScaleLearningRate the epochs end at steps 2 and 6, neither a
    multiple of the new 4 steps per epoch: ModelSaver(max_to_keep=1) still keeps both (the
    resume point it started from and the epoch end it saved), which AutoResumeTrainConfig
    needs."""
    for towers, epochs in [(2, 1), (1, 2)]:
        train(towers, 4, epochs, ScaleLearningRate(2), steps_per_epoch=2, num=16,
              model=linear(lr=0.1, momentum=0), saver=ModelSaver(max_to_keep=1))
    assert [record[1] for record in stats(logdir)] == [2, 6]
    for step in (2, 6):
        assert os.path.exists(os.path.join(logdir, 'model-{}.index'.format(step))), os.listdir(logdir)


def test_no_adjustment_keeps_the_steps_and_says_so(logdir, log_records):
    train(2, 4, 1, NoAdjustment(), steps_per_epoch=3)
    config = train(1, 4, 2, NoAdjustment(), steps_per_epoch=3)
    assert config.steps_per_epoch == 3
    assert stats(logdir) == [(1, 3, 2, 8, 3), (2, 6, 1, 4, 3)]
    assert len(resize_warnings(log_records)) == 1
    assert "global batch changed from 2 x B to 1 x B" in resize_warnings(log_records)[0]


def test_a_global_batch_that_does_not_divide_is_refused_before_anything_is_built():
    policy = KeepGlobalBatch(10)
    with pytest.raises(ValueError, match=r"KeepGlobalBatch\(10\): a global batch of 10 does not divide "
                                         r"among 4 model replicas .* \(4 replicas divide 8 and 12\)"):
        policy.per_replica_batch(4)
    trainer = SyncMultiGPUTrainerParameterServer(['/cpu:0', '/cpu:1', '/cpu:2'])
    with pytest.raises(ValueError, match="does not divide among 3"):
        launch_train_with_config(TrainConfig(model=linear(), dataflow=BatchData(DataFromList([[0]] * 9), 3),
                                             elastic=policy), trainer)
    assert trainer.tower_func is None            # nothing was built
    for bad in [0, 2.5, True]:
        with pytest.raises(ValueError, match=r"KeepGlobalBatch\(global_batch\) must be an integer >= 1"):
            KeepGlobalBatch(bad)
    with pytest.raises(TypeError, match=r"TrainConfig\(elastic=...\) must be an ElasticPolicy"):
        TrainConfig(model=linear(), dataflow=BatchData(DataFromList([[0]] * 9), 3), elastic='keep')


class StepsWithoutTowers(Trainer):
    """A trainer of its own (as a GAN's): it measures no global batch."""

    def run_step(self):
        self.hooked_sess.run(self.noop)


def test_keep_global_batch_with_a_trainer_that_measures_no_batch_is_an_error_saying_what_to_do():
    trainer = StepsWithoutTowers()
    trainer.noop = tf.no_op()
    policy = KeepGlobalBatch(4)
    with pytest.raises(ValueError) as raised:
        trainer.train(policy.callbacks(trainer), [], NewSessionCreator(), JustCurrentSession(),
                      steps_per_epoch=2, max_epoch=1)
    assert str(raised.value).startswith(
        "KeepGlobalBatch(4): StepsWithoutTowers did not measure the datapoints of its first step "
        "(trainer.global_batch is None)")
    assert 'ScaleLearningRate or NoAdjustment' in str(raised.value)
    assert trainer.loop.global_step == 1      # found at the first step


def test_an_input_that_does_not_give_the_global_batch_fails_at_the_first_step(logdir):
    with pytest.raises(ValueError, match=r"KeepGlobalBatch\(12\): the first step took 8 datapoints \(2 model "
                                         r"replicas x 4\), not 12\. .*per_replica_batch\(trainer\) \(6\)"):
        train(2, 4, 1, KeepGlobalBatch(12), steps_per_epoch=3)
    assert tfv1.train.latest_checkpoint(logdir) is None or stats_json.finished_epochs(
        stats_json.load_records(logdir), 3) == {}


def test_scaling_needs_a_rate_variable_and_a_whole_number_of_steps(logdir):
    with pytest.raises(ValueError, match=r"ScaleLearningRate\(2\): the model's optimizer\(\) created no "
                                         r"variable 'learning_rate' with tf.compat.v1.get_variable\(\)"):
        train(1, 4, 1, ScaleLearningRate(2), steps_per_epoch=3, model=linear(rate_variable=False))
    train(2, 4, 1, ScaleLearningRate(2), steps_per_epoch=3)
    with pytest.raises(ValueError, match=r"ScaleLearningRate\(2\): an epoch of 6 replica batches would be "
                                         r"1.5 steps of 4, not a whole number"):
        train(4, 4, 2, ScaleLearningRate(2), steps_per_epoch=3)


def test_epoch_ends_are_found_by_their_marker_whatever_the_steps_per_epoch():
    records = [{'epoch_num': 1, 'global_step': 4},                              # before the marker
               {'epoch_num': 2, 'global_step': 6, 'steps_per_epoch': 2},
               {'epoch_num': 3, 'global_step': 7, 'val': 1.0},                  # mid-epoch
               {'epoch_num': 3, 'global_step': 9, 'steps_per_epoch': 3, 'world_size': 2, 'global_batch': 8}]
    assert stats_json.finished_epochs(records, 4) == {1: 4, 2: 6, 3: 9}
    shape = RunShape.of_record(records[-1])
    assert (shape.world_size, shape.global_batch, shape.steps_per_epoch) == (2, 8, 3)
    assert RunShape.of_record(records[0]).world_size is None


def test_a_mid_epoch_checkpoint_resumed_with_another_number_of_towers_restarts_its_epoch(
        logdir, log_records):
    """KeepGlobalBatch(12): epoch 1 and 2 steps of epoch 2 on 4 towers (stopped there: model-6 with
    its resume state), then 3 towers: the data positions saved were dealt to 4 replicas, so the
    run restarts epoch 2 from model-4, saying so, and ends at the weights of the 4, 4 run."""
    from tensorpack_lite.callbacks.base import Callback
    from tensorpack_lite.train.base import StopTraining

    class StopAt(Callback):
        def _trigger_step(self):
            if self.global_step == 6:
                raise StopTraining('preempted at step 6')

    policy = KeepGlobalBatch(12)
    x, y = samples(48)
    with tfv1.Graph().as_default():
        dataflow = BatchData(DataFromList(list(zip(x, y)), shuffle=False), 3)
        config = TrainConfig(model=linear(), dataflow=dataflow,
                             callbacks=[ModelSaver(background=False), StopAt()], steps_per_epoch=4,
                             max_epoch=2, elastic=policy,
                             session_config=tfv1.ConfigProto(device_count={'CPU': 4}))
        trainer = SyncMultiGPUTrainerParameterServer(['/cpu:{}'.format(i) for i in range(4)])
        launch_train_with_config(config, trainer)
    assert os.path.isfile(os.path.join(logdir, 'model-6.resume'))
    config = train(3, policy.per_replica_batch(3), 2, policy, steps_per_epoch=4)
    said = [m for m in log_records.messages_at(logging.WARNING) if m.startswith('Not resuming at')]
    assert said == ["Not resuming at step 2 of 4 of epoch 2 of the run: it was saved by 4 model replicas "
                    "(towers x processes) and this run has 3; restarting epoch 2 from model-4 (the end of "
                    "epoch 1), 2 steps are trained again."]
    assert config.starting_epoch == 2 and config.resume_state is None
    assert stats(logdir) == [(1, 4, 4, 12, 4), (2, 8, 3, 12, 4)]


def test_a_mid_epoch_checkpoint_of_shards_resumed_with_another_number_of_towers_goes_on_at_its_step(
        logdir, tmp_path, log_records):
    """The same, with the samples in a ShardedData, whose position holds for any number of
    replicas: 3 towers go on at step 6 (step 2 of epoch 2), saying why, and end at the weights
    of a run on 4 towers throughout."""
    from tensorpack_lite.dataflow import ShardedData, save_shards
    from tensorpack_lite.train.base import StopTraining
    from tensorpack_lite.utils import logger
    from helpers.callbacks import RaiseAt

    x, y = samples(48)
    save_shards(DataFromList(list(zip(x, y)), shuffle=False), str(tmp_path / 'shards'), shard_bytes=200)

    def shards():
        return ShardedData(str(tmp_path / 'shards'), seed=1, window=8, lanes=4)

    policy = KeepGlobalBatch(12)
    with tfv1.Graph().as_default():
        config = TrainConfig(model=linear(), dataflow=BatchData(shards(), 3),
                             callbacks=[ModelSaver(background=False), RaiseAt(6, StopTraining('stop at 6'))],
                             steps_per_epoch=4, max_epoch=2, elastic=policy,
                             session_config=tfv1.ConfigProto(device_count={'CPU': 4}))
        trainer = SyncMultiGPUTrainerParameterServer(['/cpu:{}'.format(i) for i in range(4)])
        launch_train_with_config(config, trainer)
    config = train(3, 4, 2, policy, steps_per_epoch=4, data=shards())
    assert (config.starting_epoch, config.resume_state.steps_done) == (2, 2)
    assert ("The resume state of the run is restored although it was saved by 4 model replicas (towers x "
            "processes) and this run has 3: its data position holds for any number of processes "
            "(ShardedData) and KeepGlobalBatch(12) keeps the global batch.") in log_records.messages()
    assert stats(logdir) == [(1, 4, 4, 12, 4), (2, 8, 3, 12, 4)]
    resized = newest_weights(logdir)
    logger.set_logger_dir(str(tmp_path / 'whole'), action='d')
    train(4, 3, 2, policy, steps_per_epoch=4, data=shards())
    np.testing.assert_allclose(resized, newest_weights(str(tmp_path / 'whole')), rtol=0, atol=1e-5)
