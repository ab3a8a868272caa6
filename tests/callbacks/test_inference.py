"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import numpy as np
import pytest

from tensorpack_lite.callbacks.inference import BinaryClassificationStats
from tensorpack_lite.callbacks.inference_runner import InferenceRunner
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from helpers.trainers import scalars


class Thresholder(ModelDesc):
    """Predicts ``x[:, 0] > 0.5`` (whatever the weights), so the statistics are known in
    advance; the cost trains an unrelated weight."""

    def inputs(self):
        return [tf.TensorSpec([None, 2], tf.float32, 'x'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        w = tfv1.get_variable('w', initializer=0.0)
        tf.cast(x[:, 0] > 0.5, tf.int32, name='pred')
        return tf.reduce_mean(tf.square(w * x[:, 1] - tf.cast(label, tf.float32)), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_binary_classification_stats_over_the_whole_pass():
    rng = np.random.RandomState(0)
    x = rng.rand(30, 2).astype('float32')
    label = (rng.rand(30) > 0.4).astype('int32')
    pred = (x[:, 0] > 0.5).astype('int32')
    true_pos = np.sum((pred == 1) & (label == 1))
    precision, recall = true_pos / np.sum(pred == 1), true_pos / np.sum(label == 1)
    # batches of 7 (the last one of 2): a mean of per-batch rates would differ
    batch_precisions = [np.sum(pred[i:i + 7] & label[i:i + 7]) / np.sum(pred[i:i + 7])
                        for i in range(0, 30, 7)]
    assert not np.isclose(np.mean(batch_precisions), precision)

    points = [[xi, yi] for xi, yi in zip(x, label)]
    test_df = BatchData(DataFromList(points, shuffle=False), 7, remainder=True)
    runner = InferenceRunner(test_df, [BinaryClassificationStats('pred', 'label'),
                                       BinaryClassificationStats('pred', 'label', prefix='test')])
    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(
        model=Thresholder(), dataflow=BatchData(DataFromList(points, shuffle=False), 10),
        callbacks=[runner], extra_callbacks=[], monitors=[], max_epoch=2), trainer)
    for prefix in ('val', 'test'):
        np.testing.assert_allclose(scalars(trainer, prefix + '_precision'), [precision] * 2)
        np.testing.assert_allclose(scalars(trainer, prefix + '_recall'), [recall] * 2)


def test_binary_classification_stats_bad_input():
    with pytest.raises(TypeError, match='label_tensor_name'):
        BinaryClassificationStats('pred', ['label'])
    inf = BinaryClassificationStats('p', 'l')
    inf.before_inference()
    with pytest.raises(ValueError, match=r"'p' has shape \(3,\) but label 'l' has shape \(2,\)"):
        inf.on_fetches([np.array([1, 0, 1]), np.array([1, 0])])
    # nothing predicted positive, no positive label: 0, as BinaryStatistics defines it
    inf.on_fetches([np.array([0, 0]), np.array([0, 0])])
    assert inf.after_inference() == {'val_precision': 0.0, 'val_recall': 0.0}
