"""InferenceRunner, ScalarStats and ClassificationError: validation on the real 8x8 digits
during training, checked against direct computations with the same weights."""

import functools
import json
import os
import threading

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.inference import ClassificationError, Inferencer, ScalarStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.callbacks.trigger import PeriodicTrigger
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromGenerator, DataFromList
from tensorpack_lite.input_source import FeedInput, QueueInput, StagingInput
from tensorpack_lite.tfutils.tower import TowerFunc
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.dataflows import labelled_batches
from helpers.models import DigitsMLPBase

BATCH = 32
N_TRAIN = 640          # 20 steps per epoch
TEST = slice(1000, 1100)  # 100 samples: batches of 32, 32, 32 and 4


batches = functools.partial(labelled_batches, batch=BATCH)


class DirectValidation(Callback):
    """Placed after the runner: at each of its triggers, computes the validation numbers
    straight from the inference tower with trainer.sess, on the same weights."""

    def __init__(self, runner, images, labels):
        self.runner, self.images, self.labels = runner, images, labels
        self.errors, self.batch_mean_errors, self.batch_mean_costs = [], [], []

    def _trigger(self):
        tower = self.runner.tower_handle
        sess = self.trainer.sess
        wrong = sess.run(tower['incorrect_vector'],
                         {tower['image']: self.images, tower['label']: self.labels})
        self.errors.append(float(np.sum(wrong) / len(self.labels)))
        costs, errs = [], []
        for start in range(0, len(self.labels), BATCH):
            feed = {tower['image']: self.images[start:start + BATCH],
                    tower['label']: self.labels[start:start + BATCH]}
            cost, wrong = sess.run([tower['cost'], tower['incorrect_vector']], feed)
            costs.append(cost)
            errs.append(np.mean(wrong))
        self.batch_mean_costs.append(float(np.mean(costs)))
        self.batch_mean_errors.append(float(np.mean(errs)))


def digits_mlp():
    """The shared digits MLP (64 -> 32 -> 10, from a fixed numpy seed), averaging its cost and
    'train_error' (the mean of its 'incorrect_vector')."""
    return DigitsMLPBase(summary=('cost', 'train_error'))


def _values(trainer, name):
    return [v for _, v in trainer.monitors.get_history(name)]


@pytest.mark.parametrize('kind', ['dataflow', 'feed', 'queue'])
def test_validation_matches_a_direct_computation(digits, kind):
    images, labels = digits
    test_x, test_y = images[TEST], labels[TEST]
    test_df = batches(test_x, test_y, remainder=True)
    assert len(test_df) == 4 and len(test_y) % BATCH != 0
    source = {'dataflow': test_df, 'feed': FeedInput(test_df, infinite=False),
              'queue': QueueInput(test_df)}[kind]
    runner = InferenceRunner(source, [ScalarStats('cost'), ClassificationError('incorrect_vector')])
    direct = DirectValidation(runner, test_x, test_y)

    class Variables(Callback):
        def _setup_graph(self):
            self.names = [v.name for v in tfv1.trainable_variables()]

    before, after = Variables(), Variables()
    model = digits_mlp()
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(model=model, dataflow=batches(images[:N_TRAIN], labels[:N_TRAIN]),
                                         callbacks=[before, runner, direct, after], monitors=[],
                                         max_epoch=2), trainer)

    # once per epoch, after the epoch's steps
    history = trainer.monitors.get_history('validation_error')
    assert [step for step, _ in history] == [20, 40]
    errors = _values(trainer, 'validation_error')
    np.testing.assert_allclose(errors, direct.errors, rtol=0, atol=1e-6)
    # the sample-weighted error is not the mean of per-batch errors on this split
    assert max(abs(a - b) for a, b in zip(direct.errors, direct.batch_mean_errors)) > 1e-3
    # ScalarStats: a plain mean over the 4 batches
    np.testing.assert_allclose(_values(trainer, 'validation_cost'), direct.batch_mean_costs,
                               rtol=0, atol=1e-6)
    assert errors[-1] < 0.5 and direct.batch_mean_costs[1] < direct.batch_mean_costs[0]

    tower = runner.tower_handle
    assert tower.ns_name == 'InferenceTower' and tower.is_training is False
    assert trainer.towers['InferenceTower'] is not None
    assert model.contexts == [(True, ''), (False, 'InferenceTower')]
    assert after.names == before.names == ['fc0/W:0', 'fc0/b:0', 'fc1/W:0', 'fc1/b:0']
    assert tower['incorrect_vector'].name == 'InferenceTower/incorrect_vector:0'
    assert not [t for t in threading.enumerate() if t.name.startswith('EnqueueThread') and t.is_alive()]


def test_periodic_trigger_and_two_runners_with_their_own_tower_funcs(digits, logdir):
    images, labels = digits
    test_df = batches(images[TEST], labels[TEST], remainder=True)
    model = digits_mlp()

    def doubled(image, label):
        return tf.multiply(model.build_graph(image, label), 2.0, name='double_cost')

    every_epoch = InferenceRunner(test_df, ScalarStats('cost'))
    every_second = PeriodicTrigger(
        InferenceRunner(FeedInput(test_df), [ScalarStats(['double_cost', 'cost'], prefix='v2')],
                        tower_name='Doubled', tower_func=TowerFunc(doubled, model.get_input_signature())),
        every_k_epochs=2)
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(model=model, dataflow=batches(images[:N_TRAIN], labels[:N_TRAIN]),
                                         callbacks=[every_epoch, every_second], max_epoch=3), trainer)
    costs = _values(trainer, 'validation_cost')
    assert len(costs) == 3 and len(set(costs)) == 3
    assert [step for step, _ in trainer.monitors.get_history('v2_double_cost')] == [40]
    assert _values(trainer, 'v2_cost') == pytest.approx([costs[1]], abs=1e-6)
    assert _values(trainer, 'v2_double_cost') == pytest.approx([2 * costs[1]], abs=1e-5)
    assert model.contexts == [(True, ''), (False, 'InferenceTower'), (False, 'Doubled')]
    stats = json.load(open(os.path.join(logdir, 'stats.json')))
    assert [('validation_cost' in s, 'v2_cost' in s) for s in stats] == [
        (True, False), (True, True), (True, False)]


class StartFlag(Callback):
    started = False

    def _before_train(self):
        self.started = True


def test_tensor_not_in_the_tower_fails_before_training(digits):
    images, labels = digits
    flag = StartFlag()
    runner = InferenceRunner(batches(images[TEST], labels[TEST]),
                             [ScalarStats('cost'), ScalarStats('top5_error')])
    config = TrainConfig(model=digits_mlp(), dataflow=batches(images[:N_TRAIN], labels[:N_TRAIN]),
                         callbacks=[flag, runner], monitors=[], max_epoch=1)
    with pytest.raises(KeyError, match=r"ScalarStats fetches tensor 'top5_error:0', which is not in "
                                       r"the inference tower 'InferenceTower'"):
        launch_train_with_config(config, SimpleTrainer())
    assert not flag.started


def test_input_that_runs_out_early_is_an_error_not_the_end_of_training(digits):
    images, labels = digits

    class Lying(DataFromList):
        def __len__(self):
            return 5

    points = [[images[i:i + BATCH], labels[i:i + BATCH]] for i in range(0, 3 * BATCH, BATCH)]
    runner = InferenceRunner(Lying(points, shuffle=False), ClassificationError())
    config = TrainConfig(model=digits_mlp(), dataflow=batches(images[:N_TRAIN], labels[:N_TRAIN]),
                         callbacks=[runner], monitors=[], max_epoch=2)
    trainer = SimpleTrainer()
    with pytest.raises(RuntimeError, match=r"ran out after 3 of the 5 steps of a pass \(StopIteration\)"):
        launch_train_with_config(config, trainer)
    assert trainer.epoch_num == 1


def test_runner_arguments_are_checked(digits):
    images, labels = digits
    df = batches(images[TEST], labels[TEST])
    unsized = DataFromGenerator(lambda: iter(df))
    with pytest.raises(ValueError, match='size of DataFromGenerator is not known'):
        InferenceRunner(unsized, ScalarStats('cost'))
    with pytest.raises(TypeError, match=r'infs\[1\] is not an Inferencer'):
        InferenceRunner(df, [ScalarStats('cost'), 'incorrect_vector'])
    with pytest.raises(TypeError, match='StagingInput'):
        InferenceRunner(StagingInput(QueueInput(df)), ScalarStats('cost'))
    with pytest.raises(TypeError, match='takes a DataFlow or an InputSource'):
        InferenceRunner([images, labels], ScalarStats('cost'))
    with pytest.raises(ValueError, match='tower_name'):
        InferenceRunner(df, ScalarStats('cost'), tower_name='')
    with pytest.raises(TypeError, match='device must be an int'):
        InferenceRunner(df, ScalarStats('cost'), device='/gpu:0')


def test_an_inferencer_is_not_a_trainer_callback(digits):
    images, labels = digits
    config = TrainConfig(model=digits_mlp(), dataflow=batches(images[:N_TRAIN], labels[:N_TRAIN]),
                         callbacks=[ClassificationError()], monitors=[], max_epoch=1)
    with pytest.raises(RuntimeError, match=r'give it to an InferenceRunner'):
        launch_train_with_config(config, SimpleTrainer())


def test_scalar_stats_is_a_mean_over_batches():
    stats = ScalarStats(['cost', 'tower0/acc:0'])
    assert stats.get_fetches() == ['cost:0', 'tower0/acc:0']
    batches_ = [[1.0, 0.5], [np.float32(4.0), np.float32(0.25)], [2.5, 1.0]]
    for _ in range(2):  # a second pass starts afresh
        stats.before_inference()
        for values in batches_:
            stats.on_fetches(values)
        result = stats.after_inference()
        assert set(result) == {'validation_cost', 'validation_tower0/acc'}
        np.testing.assert_allclose([result['validation_cost'], result['validation_tower0/acc']],
                                   np.mean(batches_, axis=0), rtol=1e-7)
    bare = ScalarStats('cost', prefix='')
    bare.before_inference()
    bare.on_fetches([3.0])
    assert bare.after_inference() == {'cost': 3.0}
    bare.before_inference()
    with pytest.raises(ValueError, match="tensor 'cost' must be a scalar, got a value of shape \\(2,\\)"):
        bare.on_fetches([np.array([1.0, 2.0])])


def test_classification_error_weights_samples_not_batches():
    inf = ClassificationError()
    assert inf.get_fetches() == ['incorrect_vector:0']
    inf.before_inference()
    inf.on_fetches([np.array([1, 0, 1, 0, 0, 0], 'float32')])
    inf.on_fetches([np.array([1.0])])
    assert inf.after_inference() == {'validation_error': pytest.approx(3 / 7)}  # not (2/6 + 1) / 2
    inf.before_inference()
    inf.on_fetches([np.zeros(5)])
    assert inf.after_inference() == {'validation_error': 0.0}
    with pytest.raises(ValueError, match="'incorrect_vector' must be a vector"):
        inf.on_fetches([np.zeros((2, 2))])


def test_inferencer_statistics_must_be_scalars():
    class Bad(Inferencer):
        def _get_fetches(self):
            return ['x']

        def _on_fetches(self, results):
            pass

        def _after_inference(self):
            return {'hist': np.arange(3)}

    with pytest.raises(ValueError, match=r"Bad._after_inference\(\) returned 'hist'"):
        Bad().after_inference()
