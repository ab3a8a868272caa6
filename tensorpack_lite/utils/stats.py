"""Small accumulators for numbers seen during training or evaluation.

Example::

    acc = Accuracy()
    for correct, batch_size in results:
        acc.feed(correct, batch_size)
    print(acc.accuracy)
"""

import numpy as np

__all__ = ['StatCounter', 'RatioCounter', 'Accuracy', 'BinaryStatistics', 'OnlineMoments']


class StatCounter(object):
    """Remembers every value fed to it and summarises them (average, sum, max, min)."""

    def __init__(self):
        self.reset()

    def reset(self):
        """Forget every value."""
        self._values = []

    def feed(self, v):
        """Add the value ``v``."""
        self._values.append(v)

    def samples(self):
        """A list of the values fed so far, oldest first."""
        return list(self._values)

    @property
    def count(self):
        """How many values were fed."""
        return len(self._values)

    def _check_nonempty(self, what):
        if not self._values:
            raise ValueError("StatCounter.{} is undefined: no value was fed "
                             "(call feed() first, or check .count).".format(what))

    @property
    def average(self):
        """Mean of the values; ValueError when there is none."""
        self._check_nonempty('average')
        return np.mean(self._values)

    @property
    def sum(self):
        """Sum of the values; ValueError when there is none."""
        self._check_nonempty('sum')
        return np.sum(self._values)

    @property
    def max(self):
        """Largest value; ValueError when there is none."""
        self._check_nonempty('max')
        return max(self._values)

    @property
    def min(self):
        """Smallest value; ValueError when there is none."""
        self._check_nonempty('min')
        return min(self._values)

    def __repr__(self):
        return '<StatCounter count={}>'.format(self.count)


class RatioCounter(object):
    """Accumulates a ratio ``count / total``, e.g. correct predictions over predictions."""

    def __init__(self):
        self.reset()

    def reset(self):
        """Set count and total back to 0."""
        self._total = 0
        self._count = 0

    def feed(self, count, total=1):
        """Add ``count`` hits out of ``total`` trials (one trial by default)."""
        self._total += total
        self._count += count

    @property
    def ratio(self):
        """``count / total`` as a float; 0 when nothing was fed (total is 0)."""
        if self._total == 0:
            return 0
        return self._count * 1.0 / self._total

    @property
    def total(self):
        """Sum of the ``total`` arguments fed."""
        return self._total

    @property
    def count(self):
        """Sum of the ``count`` arguments fed."""
        return self._count


class Accuracy(RatioCounter):
    """A :class:`RatioCounter` whose ratio is called ``accuracy``."""

    @property
    def accuracy(self):
        """Same as :attr:`ratio`."""
        return self.ratio


class BinaryStatistics(object):
    """Precision/recall style statistics of binary (0/1) predictions against 0/1 labels.

    Every rate whose denominator is still 0 (no positive prediction, or no positive label)
    is reported as 0.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        """Set every counter back to 0."""
        self.nr_pos = 0        # labels equal to 1
        self.nr_neg = 0        # labels equal to 0
        self.nr_pred_pos = 0   # predictions equal to 1
        self.nr_pred_neg = 0   # predictions equal to 0
        self.corr_pos = 0      # true positives
        self.corr_neg = 0      # true negatives

    def feed(self, pred, label):
        """Add a batch.

        Args:
            pred, label: arrays (or nested lists) of the same shape holding 0 or 1 (bool works).
        """
        pred = np.asarray(pred)
        label = np.asarray(label)
        if pred.shape != label.shape:
            raise ValueError("BinaryStatistics.feed(): pred has shape {} but label has shape {}"
                             .format(pred.shape, label.shape))
        pred_pos = pred == 1
        pred_neg = pred == 0
        label_pos = label == 1
        label_neg = label == 0
        self.nr_pos += int(label_pos.sum())
        self.nr_neg += int(label_neg.sum())
        self.nr_pred_pos += int(pred_pos.sum())
        self.nr_pred_neg += int(pred_neg.sum())
        self.corr_pos += int((pred_pos & label_pos).sum())
        self.corr_neg += int((pred_neg & label_neg).sum())

    @property
    def precision(self):
        """True positives over predicted positives (0 when nothing was predicted positive)."""
        if self.nr_pred_pos == 0:
            return 0
        return self.corr_pos * 1.0 / self.nr_pred_pos

    @property
    def recall(self):
        """True positives over actual positives (0 when there was no positive label)."""
        if self.nr_pos == 0:
            return 0
        return self.corr_pos * 1.0 / self.nr_pos

    @property
    def false_positive(self):
        """Share of the positive predictions that are wrong, i.e. ``1 - precision``
        (0 when nothing was predicted positive)."""
        if self.nr_pred_pos == 0:
            return 0
        return 1 - self.precision

    @property
    def false_negative(self):
        """Share of the positive labels that were missed, i.e. ``1 - recall``
        (0 when there was no positive label)."""
        if self.nr_pos == 0:
            return 0
        return 1 - self.recall


class OnlineMoments(object):
    """Running mean and variance of the values fed, without keeping them (Welford's update).

    Values may be numbers or arrays of one shape (moments are then elementwise).

    Example::

        moments = OnlineMoments()
        for x in (1.0, 2.0, 4.0):
            moments.feed(x)
        moments.mean, moments.variance   # 7/3 and 7/3 (the unbiased sample variance)
    """

    def __init__(self):
        self._count = 0
        self._mean = 0
        self._sum_sq_dev = 0     # the sum of squared deviations from the current mean

    def feed(self, x):
        """Add one value (a number, or an array of the shape of the earlier ones)."""
        self._count += 1
        delta = x - self._mean
        self._mean = self._mean + delta / self._count
        self._sum_sq_dev = self._sum_sq_dev + delta * (x - self._mean)

    @property
    def mean(self):
        """The mean of the values fed (0 before any)."""
        return self._mean

    @property
    def variance(self):
        """The unbiased sample variance (divided by n - 1); needs two values or more."""
        if self._count < 2:
            raise ValueError("OnlineMoments.variance needs at least 2 values, got {}.".format(self._count))
        return self._sum_sq_dev / (self._count - 1)

    @property
    def std(self):
        """The square root of :attr:`variance`."""
        return np.sqrt(self.variance)
