"""Inferencers: what an :class:`~tensorpack_lite.callbacks.inference_runner.InferenceRunner`
computes on the outputs of its inference tower.

An inferencer names the tensors it needs (:meth:`Inferencer.get_fetches`), receives their
values after every batch (:meth:`Inferencer.on_fetches`) and, at the end of a pass over the
data, returns scalar statistics (:meth:`Inferencer.after_inference`), which the runner puts
into ``trainer.monitors``.

Example::

    InferenceRunner(test_dataflow, [ScalarStats('cost'), ClassificationError('incorrect_vector')])
    # after each epoch: monitors get 'validation_cost' and 'validation_error'

For a binary classifier, :class:`BinaryClassificationStats` reports precision and recall.
"""

import numbers

import numpy as np

from ..loop.callback import Callback
from ..tfutils.common import check_tensor_names, get_op_tensor_name
from ..utils.stats import BinaryStatistics, RatioCounter

__all__ = ['Inferencer', 'ScalarStats', 'ClassificationError', 'BinaryClassificationStats']


class Inferencer(Callback):
    """Base class of the statistics an InferenceRunner computes over a pass of its data.

    It is a callback driven by an InferenceRunner (``setup_graph``, ``before_train`` and
    ``after_train`` are forwarded by the runner), never registered to a trainer directly.
    For each pass the runner calls :meth:`before_inference`, then :meth:`on_fetches` once
    per batch with the values of :meth:`get_fetches`, then :meth:`after_inference`.

    Subclasses implement ``_get_fetches()`` and ``_on_fetches(results)``, and usually
    ``_before_inference()`` (reset the state) and ``_after_inference()`` (return a dict
    name -> scalar).
    """

    _runner = None  # the InferenceRunner this inferencer belongs to

    def setup_graph(self, trainer):
        if self._runner is None:
            raise RuntimeError(
                "{} is an Inferencer: give it to an InferenceRunner (e.g. "
                "InferenceRunner(dataflow, [{}])) instead of registering it as a callback.".format(
                    self, type(self).__name__))
        super().setup_graph(trainer)

    def before_inference(self):
        """Called before every pass over the data."""
        self._before_inference()

    def _before_inference(self):
        """Reset the statistics before a new pass."""

    def get_fetches(self):
        """The names of the tensors (``'name:0'``) this inferencer needs from the tower."""
        names = check_tensor_names(self._get_fetches(), str(self), 'what _get_fetches() returns')
        return [get_op_tensor_name(name)[1] for name in names]

    def _get_fetches(self):
        raise NotImplementedError("{} must implement _get_fetches()".format(type(self).__name__))

    def on_fetches(self, results):
        """Called after every batch with the values of :meth:`get_fetches`, in that order."""
        self._on_fetches(results)

    def _on_fetches(self, results):
        raise NotImplementedError("{} must implement _on_fetches()".format(type(self).__name__))

    def after_inference(self):
        """Called after every pass; returns a dict name -> scalar (possibly empty), which the
        runner puts into the trainer's monitors."""
        stats = self._after_inference()
        if stats is None:
            return {}
        if not isinstance(stats, dict):
            raise TypeError("{}._after_inference() must return a dict name -> scalar or None, got "
                            "{!r}".format(self, stats))
        for name, value in stats.items():
            if not isinstance(name, str):
                raise TypeError("{}._after_inference() returned a statistic named {!r}: names must "
                                "be str".format(self, name))
            if not (isinstance(value, numbers.Number) or
                    (isinstance(value, (np.ndarray, np.generic)) and np.size(value) == 1)):
                raise ValueError("{}._after_inference() returned '{}' = {!r}, which is not a "
                                 "scalar".format(self, name, value))
        return stats

    def _after_inference(self):
        """Return the statistics of the pass, a dict name -> scalar."""
        return None


class ScalarStats(Inferencer):
    """The mean over batches of scalar tensors, reported as ``<prefix>_<name>``.

    Each batch counts the same, whatever its size: for a statistic that is a mean over
    samples, a smaller last batch makes this differ from the mean over all samples (see
    :class:`ClassificationError` for an exact error rate).

    Args:
        names (str or list[str]): names of scalar tensors in the inference tower.
        prefix (str): put before each name; '' or None to report the bare names.

    Example::

        ScalarStats(['cost', 'accuracy'])   # 'validation_cost', 'validation_accuracy'
    """

    def __init__(self, names, prefix='validation'):
        self.names = check_tensor_names(names, 'ScalarStats', one_name=True, empty=False)
        self.prefix = prefix
        self.stats = []

    def _before_inference(self):
        self.stats = []

    def _get_fetches(self):
        return self.names

    def _on_fetches(self, results):
        for name, value in zip(self.names, results):
            if np.ndim(value) != 0:
                raise ValueError("ScalarStats: tensor '{}' must be a scalar, got a value of shape "
                                 "{}".format(name, np.shape(value)))
        self.stats.append([float(v) for v in results])

    def _after_inference(self):
        if not self.stats:
            return {}
        means = np.mean(np.asarray(self.stats, dtype=np.float64), axis=0)
        return {stat: float(mean) for stat, mean in zip(self._stat_names(), means)}

    def _stat_names(self):
        op_names = [get_op_tensor_name(name)[0] for name in self.names]
        return ['{}_{}'.format(self.prefix, name) if self.prefix else name for name in op_names]


class ClassificationError(Inferencer):
    """The fraction of wrong predictions over all samples of the pass.

    The tensor is a vector with one entry per sample, 1 where the prediction is wrong and 0
    where it is right, e.g.::

        wrong = tf.cast(tf.not_equal(tf.argmax(logits, 1, output_type=tf.int32), label),
                        tf.float32, name='incorrect_vector')

    The error is ``sum(wrong) / number of samples`` over the whole pass, so batches of
    different sizes are weighted by their size (unlike a mean of per-batch errors).

    Args:
        wrong_tensor_name (str): name of the 0/1 vector in the inference tower.
        summary_name (str): name of the statistic put into the monitors.
    """

    def __init__(self, wrong_tensor_name='incorrect_vector', summary_name='validation_error'):
        self.wrong_tensor_name = check_tensor_names(
            wrong_tensor_name, 'ClassificationError', 'wrong_tensor_name', one_name=True, empty=False)[0]
        self.summary_name = summary_name
        self.err_stat = RatioCounter()

    def _before_inference(self):
        self.err_stat = RatioCounter()

    def _get_fetches(self):
        return [self.wrong_tensor_name]

    def _on_fetches(self, results):
        vec = np.asarray(results[0])
        if vec.ndim != 1:
            raise ValueError("ClassificationError: tensor '{}' must be a vector with one entry per "
                             "sample, got a value of shape {}".format(self.wrong_tensor_name, vec.shape))
        self.err_stat.feed(float(np.sum(vec, dtype=np.float64)), len(vec))

    def _after_inference(self):
        return {self.summary_name: float(self.err_stat.ratio)}

    def _stat_names(self):
        return [self.summary_name]


class BinaryClassificationStats(Inferencer):
    """Precision and recall of 0/1 predictions against 0/1 labels, counted over all the
    samples of the pass (not averaged over batches), reported as ``<prefix>_precision``
    and ``<prefix>_recall``. A rate whose denominator is 0 (nothing predicted positive, or
    no positive label) is reported as 0.

    Args:
        pred_tensor_name (str): the tensor of 0/1 predictions in the inference tower.
        label_tensor_name (str): the tensor of 0/1 labels, of the same shape.
        prefix (str): put before the names of the statistics.

    Example::

        pred = tf.cast(tf.sigmoid(logit) > 0.5, tf.int32, name='pred')
        InferenceRunner(test_df, BinaryClassificationStats('pred', 'label'))
        # monitors get 'val_precision' and 'val_recall'
    """

    def __init__(self, pred_tensor_name, label_tensor_name, prefix='val'):
        for arg, value in (('pred_tensor_name', pred_tensor_name),
                           ('label_tensor_name', label_tensor_name), ('prefix', prefix)):
            if not isinstance(value, str) or not value:
                raise TypeError("BinaryClassificationStats: {} must be a non-empty str, got {!r}".format(
                    arg, value))
        self.pred_tensor_name = pred_tensor_name
        self.label_tensor_name = label_tensor_name
        self.prefix = prefix
        self.stat = BinaryStatistics()

    def _before_inference(self):
        self.stat = BinaryStatistics()

    def _get_fetches(self):
        return [self.pred_tensor_name, self.label_tensor_name]

    def _on_fetches(self, results):
        pred, label = (np.asarray(r) for r in results)
        if pred.shape != label.shape:
            raise ValueError("BinaryClassificationStats: prediction '{}' has shape {} but label '{}' has "
                             "shape {}".format(self.pred_tensor_name, pred.shape,
                                               self.label_tensor_name, label.shape))
        self.stat.feed(pred, label)

    def _after_inference(self):
        precision, recall = self._stat_names()
        return {precision: float(self.stat.precision), recall: float(self.stat.recall)}

    def _stat_names(self):
        return [self.prefix + '_precision', self.prefix + '_recall']
