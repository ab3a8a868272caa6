"""FeedfreePredictor, MultiThreadAsyncPredictor and remap_input_source (in predictors and in
real trainings)."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.input_source import (FeedInput, QueueInput, TensorInput)
from tensorpack_lite.predict.config import PredictConfig
from tensorpack_lite.predict.feedfree import FeedfreePredictor

from helpers.models import (B_VALUE, LABEL_BATCHES, W_VALUE, X_BATCHES, batches_dataflow,
                            linear_config)


@pytest.mark.parametrize('kind', ['queue', 'feed'])
def test_feedfree_predictor_runs_through_the_source(kind):
    ds = batches_dataflow(X_BATCHES, LABEL_BATCHES)
    source = QueueInput(ds) if kind == 'queue' else FeedInput(ds)
    pred = FeedfreePredictor(linear_config(['logits', 'label']), source)
    try:
        assert pred.graph.finalized
        for k in range(2 * len(X_BATCHES)):   # the source repeats its data
            logits, label = pred()
            x = X_BATCHES[k % 3]
            np.testing.assert_allclose(logits, x.dot(W_VALUE) + B_VALUE, rtol=1e-5)
            np.testing.assert_array_equal(label, LABEL_BATCHES[k % 3])
        with pytest.raises(TypeError, match=r"takes no inputs \(they come from its {}\), got 1".format(
                type(source).__name__)):
            pred(X_BATCHES[0])
    finally:
        pred.close()
    if kind == 'queue':
        assert not source.thread.is_alive()
    assert pred.sess._closed


def test_feedfree_predictor_tensor_input_and_end_of_data():
    def tower_fn(a):
        return tf.multiply(a, 3.0, name='tripled')

    dataset = tf.data.Dataset.from_tensor_slices(np.arange(4, dtype='float32').reshape(2, 2))
    iterator = tfv1.data.make_initializable_iterator(dataset)

    config = PredictConfig(tower_func=tower_fn, input_signature=[tf.TensorSpec([2], tf.float32, 'a')],
                           output_names=['tripled'], create_graph=False)
    pred = FeedfreePredictor(config, TensorInput(lambda: [iterator.get_next()]))
    try:
        pred.sess.run(iterator.initializer)
        np.testing.assert_allclose(pred()[0], [0., 3.])
        np.testing.assert_allclose(pred()[0], [6., 9.])
        with pytest.raises(tf.errors.OutOfRangeError):
            pred()
    finally:
        pred.close()


def test_feedfree_predictor_bad_arguments():
    source = QueueInput(batches_dataflow(X_BATCHES, LABEL_BATCHES))
    with pytest.raises(TypeError, match='takes a PredictConfig'):
        FeedfreePredictor(None, source)
    with pytest.raises(TypeError, match='takes an InputSource'):
        FeedfreePredictor(linear_config(['logits']), batches_dataflow(X_BATCHES, LABEL_BATCHES))
    config = linear_config(['logits'])
    config.return_input = True
    with pytest.raises(ValueError, match='return_input is not supported'):
        FeedfreePredictor(config, source)
    with pytest.raises(ValueError, match=r"output_names: Tensor 'nope:0' is not in tower"):
        FeedfreePredictor(linear_config(['nope']), source)
    with pytest.raises(RuntimeError, match='QueueInput is already set up'):
        FeedfreePredictor(linear_config(['logits']), source)
