"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

import numpy as np
import pytest

from tensorpack_lite.callbacks.graph import CheckNumerics
from tensorpack_lite.compat import tf, tfv1
from helpers.trainers import CountingTrainer, train


def _poisonable_model(initial=1.0):
    """Trainable 'good/w' and 'bad/w', a step that halves both, and an op writing ``value``
    into 'bad/w'."""
    good = tfv1.get_variable('good/w', initializer=1.0)
    bad = tfv1.get_variable('bad/w', initializer=initial)
    step = tf.group(good.assign(good * 0.5), bad.assign(bad * 0.5))
    value = tfv1.placeholder(tf.float32, [], name='poison_value')
    return step, bad.assign(value).op, value


def _poison_at(poison, value_ph, value, global_step):
    def after_step(trainer):
        if trainer.global_step == global_step:
            trainer.sess.run(poison, {value_ph: value})
    return after_step


@pytest.mark.parametrize('value, word', [(np.nan, 'NaN'), (np.inf, 'Inf')])
def test_check_numerics_at_the_end_of_the_epoch(value, word):
    step, poison, value_ph = _poisonable_model()
    trainer = CountingTrainer(step, _poison_at(poison, value_ph, value, global_step=4))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"CheckNumerics\['bad/w'\].*" + word):
        train(trainer, [CheckNumerics()], steps_per_epoch=3, max_epoch=3)
    # epoch 1 passed its check; epoch 2 (steps 4 to 6) ran to its end and failed there
    assert trainer.steps == 6 and trainer.epoch_num == 2


def test_check_numerics_with_every_step():
    step, poison, value_ph = _poisonable_model()
    trainer = CountingTrainer(step, _poison_at(poison, value_ph, np.nan, global_step=2))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"CheckNumerics\['bad/w'\]"):
        train(trainer, [CheckNumerics(run_as_trigger=False, run_step=True)], steps_per_epoch=5, max_epoch=1)
    assert trainer.steps == 3   # the step after the poisoning


def test_check_numerics_before_training_and_when_all_is_well():
    step, _, _ = _poisonable_model(initial=float('nan'))
    trainer = CountingTrainer(step)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"CheckNumerics\['bad/w'\]"):
        train(trainer, [CheckNumerics()], steps_per_epoch=2, max_epoch=1)
    assert trainer.steps == 0

    with tfv1.Graph().as_default():
        step, _, _ = _poisonable_model()
        trainer = CountingTrainer(step)
        train(trainer, [CheckNumerics(run_step=True)], steps_per_epoch=2, max_epoch=2)
        assert trainer.steps == 4
