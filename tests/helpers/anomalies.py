"""Data for the tests of rolling back (RollbackOnAnomaly): batches of a rule :class:`helpers.models.MLP`
learns, the same with the batches of a step made NaN or scaled, and the same without the batches of a
window of steps.

Example::

    data = batches(60)
    bad = poisoned(data, 37)                  # NaN inputs at global step 37
    clean = without_steps(data, 36, 37)       # what a run that rolled back 36-37 trained on
"""

import numpy as np

__all__ = ['FEATURES', 'BATCH', 'batches', 'poisoned', 'without_steps']

FEATURES, BATCH = 4, 4


def batches(count, seed=0, noise=0.0):
    """``count`` [x, label] batches of ``BATCH`` datapoints of ``FEATURES`` features, label the
    arg-max of x's first 3 features (3 classes), x with gaussian ``noise`` added."""
    rng = np.random.RandomState(seed)
    out = []
    for _ in range(count):
        x = rng.randn(BATCH, FEATURES).astype('float32')
        label = np.argmax(x[:, :3], axis=1).astype('int32')
        out.append([x + noise * rng.randn(*x.shape).astype('float32'), label])
    return out


def poisoned(data, step, value=np.nan, towers=1):
    """``data`` with the batch(es) of global step ``step`` (1-based; ``towers`` batches a step)
    set to NaN (``value`` NaN) or multiplied by ``value``."""
    data = [[x.copy(), y] for x, y in data]
    for index in range((step - 1) * towers, step * towers):
        x = data[index][0]
        data[index][0] = np.full_like(x, value) if np.isnan(value) else x * np.float32(value)
    return data


def without_steps(data, first, last, towers=1):
    """``data`` without the batches of global steps ``first`` to ``last``."""
    return data[:(first - 1) * towers] + data[last * towers:]
