"""The time bounds the docs state are the ones the code's timeouts give: a failed step's end
(docs/trainer.md, docs/reliability.md) and a lost worker's (docs/distributed.md). The stages
themselves are tested at their timeouts in test_failed_step.py and test_distributed.py; here,
that the documented sums are the constants' sums, so a changed timeout cannot leave a stale
number in the docs."""

import os
import re

from tensorpack_lite.train.base import Trainer
from tensorpack_lite.train.distributed import DistributedTrainerBase

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs')


def read(name):
    with open(os.path.join(DOCS, name), encoding='utf-8') as f:
        return ' '.join(f.read().split())     # lines joined: a sentence may wrap anywhere


def end_after_failure(trainer_class):
    """The longest a trainer takes to end after a failed step: probe the session, the
    callbacks' after_train, the close, the bounded exit."""
    return (trainer_class.SESSION_PROBE_TIMEOUT + trainer_class.AFTER_FAILURE_TIMEOUT
            + trainer_class.CLOSE_TIMEOUT + trainer_class.EXIT_TIMEOUT)


def test_the_end_after_a_failed_step_is_the_sum_of_the_four_timeouts():
    single, distributed = end_after_failure(Trainer), end_after_failure(DistributedTrainerBase)
    trainer_md = read('trainer.md')
    stated = re.search(r'ends with that error within (\d+) seconds at most \((\d+) \+ (\d+) \+ (\d+) \+ '
                       r'(\d+), the four timeouts above; (\d+) for the distributed trainers, whose close '
                       r'has (\d+)\)', trainer_md)
    assert stated, "docs/trainer.md no longer states the bound after a failed step"
    total, probe, after_train, close, exit_, total_distributed, close_distributed = (
        int(n) for n in stated.groups())
    timeouts = (Trainer.SESSION_PROBE_TIMEOUT, Trainer.AFTER_FAILURE_TIMEOUT, Trainer.CLOSE_TIMEOUT,
                Trainer.EXIT_TIMEOUT)
    assert (probe, after_train, close, exit_) == timeouts
    assert total == single == 45
    assert (total_distributed, close_distributed) == (distributed, DistributedTrainerBase.CLOSE_TIMEOUT)
    assert '({} s at most: the sum of its four timeouts)'.format(total) in read('reliability.md')


def test_a_lost_worker_ends_within_the_stated_bound_after_the_cut():
    found = 2 * DistributedTrainerBase.PROBE_INTERVAL      # one wait, then a probe of as long
    bound = found + max(DistributedTrainerBase.EXIT_AFTER_LOSS_TIMEOUT,
                        end_after_failure(DistributedTrainerBase))
    distributed_md = read('distributed.md')
    stated = re.search(r'a lost task is found within 2 x `PROBE_INTERVAL`.*?failed step \((\d+) s at '
                       r'most.*?(\d+) s at most after the cut', distributed_md)
    assert stated, "docs/distributed.md no longer states the bound after a cut link"
    assert [int(n) for n in stated.groups()] == [end_after_failure(DistributedTrainerBase), bound] == [42, 44]
    assert 'within {:g} s at most of the cut'.format(bound) in read('reliability.md')
