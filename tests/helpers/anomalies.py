"""Data for the tests of rolling back (RollbackOnAnomaly): batches of a rule :class:`helpers.models.MLP`
learns, the same with the batches of a step made NaN or scaled, and the same without the batches of a
window of steps.

Example::

    data = batches(60)
    bad = poisoned(data, 37)                  # NaN inputs at global step 37
    clean = without_steps(data, 36, 37)       # what a run that rolled back 36-37 trained on
"""

import json
import os

import numpy as np

from tensorpack_lite.callbacks import RollbackOnAnomaly

__all__ = ['FEATURES', 'BATCH', 'batches', 'poisoned', 'without_steps', 'add_rollback_arguments',
           'poison_shard', 'rollback_callbacks', 'RecordedRollback', 'load_rollbacks']

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


# ----- the multi-process scripts (train_tiny_multiworker.py, horovod_scripts/train_tiny.py) -------------

def add_rollback_arguments(parser, who):
    """The scripts' options of a run with a poisoned step, rolled back or not; ``who``: 'worker' or
    'rank'."""
    parser.add_argument('--rollback', type=int, metavar='SNAPSHOT_EVERY',
                        help='RollbackOnAnomaly(snapshot_every=SNAPSHOT_EVERY) on every {}; its windows '
                             'go to OUT/rollbacks<k>.json'.format(who))
    parser.add_argument('--watch-gradient-norm', action='store_true',
                        help='--rollback watches the gradient norm too (watch_gradient_norm=True)')
    parser.add_argument('--no-cost-check', action='store_true',
                        help='trainer.CHECK_COST = False (implied by --rollback): a NaN cost does not '
                             'stop training')
    parser.add_argument('--poison', type=int, nargs=2, metavar=(who.upper(), 'STEP'),
                        help="the inputs of {} {}'s datapoints of global step STEP are NaN".format(
                            who, who.upper()))


def poison_shard(samples, args, size, step_size):
    """``samples`` (the datapoints of every process, shared out by RankShardData) with those of
    process ``args.poison[0]`` in global step ``args.poison[1]`` made NaN (``step_size``: the
    datapoints of one global step of every process)."""
    if not args.poison:
        return samples
    index, step = args.poison
    samples = list(samples)
    for i in range((step - 1) * step_size, step * step_size):
        if i % size == index:
            x, y = samples[i]
            samples[i] = [np.full_like(x, np.nan), y]
    return samples


def rollback_callbacks(args, trainer, out_dir, index):
    """The callbacks of ``--rollback`` (none without it); sets ``trainer.CHECK_COST`` as the options
    say."""
    if args.rollback or args.no_cost_check:
        trainer.CHECK_COST = False
    if not args.rollback:
        return []
    path = os.path.join(out_dir, 'rollbacks{}.json'.format(index))
    return [RecordedRollback(path, snapshot_every=args.rollback,
                             watch_gradient_norm=args.watch_gradient_norm)]


class RecordedRollback(RollbackOnAnomaly):
    """RollbackOnAnomaly('cost') writing its windows to ``path`` when training ends."""

    def __init__(self, path, **kwargs):
        super().__init__('cost', **kwargs)
        self.path = path

    def _after_train(self):
        with open(self.path, 'w') as f:
            json.dump(self.windows, f)


def load_rollbacks(out_dir, index):
    """The windows ``RecordedRollback`` of process ``index`` wrote."""
    with open(os.path.join(str(out_dir), 'rollbacks{}.json'.format(index))) as f:
        return json.load(f)
