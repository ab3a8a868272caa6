"""FeedfreePredictor, MultiThreadAsyncPredictor and remap_input_source (in predictors and in
real trainings)."""

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.inference import ScalarStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.input_source import (FeedInput, QueueInput, StagingInput, remap_input_source)
from tensorpack_lite.input_source.input_source_base import FeedfreeInput
from tensorpack_lite.predict.config import PredictConfig
from tensorpack_lite.predict.feedfree import FeedfreePredictor
from tensorpack_lite.tfutils.tower import TowerFunc
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.models import B_VALUE, W_VALUE, X_BATCHES, batches_dataflow, linear_config


def test_remapped_source_gives_only_the_named_inputs():
    source = remap_input_source(QueueInput(batches_dataflow(X_BATCHES)), ['x'])
    assert isinstance(source, FeedfreeInput)
    pred = FeedfreePredictor(linear_config(['logits', 'label']), source)
    try:
        x_t, label_t = pred._config.tower_func.towers[-1].inputs
        assert x_t.op.type == 'Identity' and x_t.op.inputs[0].op.type == 'QueueDequeueV2'   # counted
        assert label_t.op.type == 'Placeholder' and label_t.name == 'label:0'
        logits_t = pred._output_tensors[0]
        for x in X_BATCHES:
            np.testing.assert_allclose(pred._hooked_sess.run(logits_t), x.dot(W_VALUE) + B_VALUE, rtol=1e-5)
        with pytest.raises(tf.errors.InvalidArgumentError,
                           match="must feed a value for placeholder tensor 'label'"):
            pred()   # 'label' is needed but nothing feeds it
    finally:
        pred.close()


def test_remapped_source_in_another_order():
    def tower_fn(a, b):
        return tf.subtract(a, 2 * b, name='out')

    signature = [tf.TensorSpec([None], tf.float32, 'a'), tf.TensorSpec([None], tf.float32, 'b')]
    a_values = [np.array([1., 2.], 'float32'), np.array([5.], 'float32')]
    b_values = [np.array([10., 20.], 'float32'), np.array([-1.], 'float32')]
    source = remap_input_source(QueueInput(batches_dataflow(b_values, a_values)), ['b', 'a'])
    pred = FeedfreePredictor(PredictConfig(tower_func=TowerFunc(tower_fn, signature), output_names=['out']),
                             source)
    try:
        for a, b in zip(a_values, b_values):
            np.testing.assert_allclose(pred()[0], a - 2 * b)
    finally:
        pred.close()


class ThreeInputs(ModelDesc):
    """cost = mean((w x - y)^2), w starting at 0.5; 'extra' is used only with use_extra."""

    def __init__(self, use_extra=False):
        self.use_extra = use_extra

    def inputs(self):
        return [tf.TensorSpec([None], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y'),
                tf.TensorSpec([None], tf.float32, 'extra')]

    def build_graph(self, x, y, extra):
        w = tfv1.get_variable('w', initializer=0.5)
        if self.use_extra:
            y = y + extra
        tf.reduce_sum(x, name='x_sum')
        return tf.reduce_mean(tf.square(w * x - y), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.01)


class FirstCost(Callback):
    def __init__(self):
        self.costs = []

    def _before_run(self, ctx):
        return ['tower0/cost:0'] if self.trainer.tower_func.towers[0].ns_name else ['cost:0']

    def _after_run(self, ctx, values):
        self.costs.append(float(values.results[0]))


XS = [np.array([1., 2., 3.], 'float32'), np.array([-1., 4.], 'float32')]


YS = [np.array([0., 5., 1.], 'float32'), np.array([2., 2.], 'float32')]


def test_training_on_a_remapped_feed_input():
    source = remap_input_source(FeedInput(batches_dataflow(YS, XS)), ['y', 'x'])   # the data gives [y, x]
    assert not isinstance(source, FeedfreeInput) and source.size() == 2
    recorder = FirstCost()
    launch_train_with_config(TrainConfig(model=ThreeInputs(), data=source, callbacks=[recorder],
                                         extra_callbacks=[], monitors=[], max_epoch=1), SimpleTrainer())
    # w is still 0.5 in the first step
    assert recorder.costs[0] == pytest.approx(np.mean(np.square(0.5 * XS[0] - YS[0])))

    with tfv1.Graph().as_default():
        source = remap_input_source(FeedInput(batches_dataflow(YS, XS)), ['y', 'x'])
        config = TrainConfig(model=ThreeInputs(use_extra=True), data=source, extra_callbacks=[],
                             monitors=[], max_epoch=1)
        with pytest.raises(tf.errors.InvalidArgumentError, match="placeholder tensor 'extra'"):
            launch_train_with_config(config, SimpleTrainer())


def test_inference_runner_restarts_a_remapped_source_every_pass():
    # StagingInput stages every input: here the data gives all three
    train_source = remap_input_source(QueueInput(batches_dataflow(YS, XS, XS)), ['y', 'extra', 'x'])
    assert isinstance(train_source, FeedfreeInput)
    val_source = remap_input_source(FeedInput(batches_dataflow(XS, YS), infinite=False), ['x', 'y'])
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(
        model=ThreeInputs(), data=StagingInput(train_source),
        callbacks=[InferenceRunner(val_source, ScalarStats('x_sum'))],
        extra_callbacks=[], monitors=[], max_epoch=3), trainer)
    expected = np.mean([np.sum(x) for x in XS])
    assert [v for _, v in trainer.monitors.get_history('validation_x_sum')] == [pytest.approx(expected)] * 3


def test_remap_input_source_bad_arguments():
    with pytest.raises(TypeError, match='takes an InputSource'):
        remap_input_source(batches_dataflow(XS), ['x'])
    with pytest.raises(TypeError, match='names must be a list'):
        remap_input_source(FeedInput(batches_dataflow(XS)), 'x')
    with pytest.raises(ValueError, match='duplicate names'):
        remap_input_source(FeedInput(batches_dataflow(XS)), ['x', 'x'])
    source = remap_input_source(FeedInput(batches_dataflow(XS)), ['z'])
    with pytest.raises(ValueError,
                       match=r"\['z'\] are not inputs of the model, whose inputs are \['x', 'y', 'extra'\]"):
        source.setup(ThreeInputs().get_input_signature())
