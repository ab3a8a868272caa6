"""Small trainers and runs for the tests of callbacks: a trainer counting its steps, one
sleeping (on a VirtualClock) each step, and the scalars a run put."""

import time

from tensorpack_lite.callbacks.monitor import MonitorBase
from tensorpack_lite.compat import tfv1
from tensorpack_lite.train.base import Trainer


class CountingTrainer(Trainer):
    """Runs ``train_op`` in the hooked session; ``after_step(trainer)`` runs after each step
    (through the plain session, unseen by callbacks). ``steps`` counts the steps started."""

    def __init__(self, train_op, after_step=None):
        super().__init__()
        self.train_op = train_op
        self._after_step = after_step
        self.steps = 0

    def run_step(self):
        self.steps += 1
        self.hooked_sess.run(self.train_op)
        if self._after_step is not None:
            self._after_step(self)


def counter_trainer():
    counter = tfv1.get_variable('counter', shape=[], initializer=tfv1.zeros_initializer())
    return CountingTrainer(tfv1.assign_add(counter, 1.0).op)


class SleepTrainer(Trainer):
    """Each step sleeps ``step_time(trainer)`` seconds (through ``sleep``, e.g. a VirtualClock's),
    then runs the train op in the hooked session (so that hooks and the step counter see it)."""

    def __init__(self, step_time, sleep=time.sleep):
        super().__init__()
        self._step_time = step_time if callable(step_time) else (lambda _: step_time)
        self._sleep = sleep

    def run_step(self):
        self._sleep(self._step_time(self))
        self.hooked_sess.run(self.train_op)


def make_trainer(step_time=0.0, sleep=time.sleep):
    counter = tfv1.get_variable('counter', shape=[], initializer=tfv1.zeros_initializer())
    trainer = SleepTrainer(step_time, sleep)
    trainer.train_op = tfv1.assign_add(counter, 1.0).op
    return trainer


def train(trainer, callbacks, steps_per_epoch, max_epoch, monitors=()):
    trainer.train_with_defaults(callbacks=list(callbacks), monitors=list(monitors),
                                extra_callbacks=[], steps_per_epoch=steps_per_epoch,
                                max_epoch=max_epoch)


def scalars(trainer, name):
    return [value for _, value in trainer.monitors.get_history(name)]


class ScalarRecorder(MonitorBase):
    """Remembers every scalar put, with the epoch it was put in."""

    def __init__(self):
        self.scalars = []

    def process_scalar(self, name, value):
        self.scalars.append((self.epoch_num, name, value))

    def names(self):
        return {name for _, name, _ in self.scalars}
