#!/usr/bin/env python
"""How long a checkpoint holds training: ModelSaver(background=False) against
ModelSaver(background=True), with a run without ModelSaver as the reference, in one run.

The model: four 2560x2560 float32 matrices (26M parameters, 105 MB: ResNet-50's size) applied
to a batch of 4 vectors, trained by SimpleTrainer with plain SGD, the input a constant in the
graph (DummyConstantInput). ``PeriodicTrigger(ModelSaver(max_to_keep=2), every_k_steps=K)``.
Each iteration is timed from one step's end (after its callbacks) to the next one's, in
cycles of K steps that end with a trigger (the first cycle, with the first save of a run, which
builds TensorFlow's save executor, is left out). Medians over the cycles of every round:
  step          the step before a trigger (the previous checkpoint long written)
  trigger       the step that triggers a save (the step, then the trigger)
  stall         trigger - step: how long a checkpoint holds the training loop
  others/none   the other steps of a cycle (those while a background write runs included: it
                shares the CPUs) against the steps of the run without ModelSaver
  cost/ckpt     a whole cycle minus the cycle of the run without ModelSaver: what one checkpoint
                costs in all (the stall and the slowdown of the steps while it is written)
  save          the wall time of a whole save, from the trigger until its files, resume state
                and checkpoint list are written (for background=False, inside the trigger)
The three ran one after the other in rounds, in alternating order.

Then what the data position adds to each checkpoint (``<prefix>.resume``), for the pipelines of
the examples, between two steps of a short run: the time of ``trainer.resume_state()`` and of
``state.write(prefix)`` (median of 20), and the file's size.

    python benchmarks/checkpoint_stall.py              # about a minute on 2 cores
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
from tabulate import tabulate

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.callbacks import Callback, ModelSaver, PeriodicTrigger
from tensorpack_lite.dataflow import AugmentImageComponent, BatchData, DataFromList, imgaug
from tensorpack_lite.input_source import DummyConstantInput, FeedInput, QueueInput
from tensorpack_lite.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import logger

WIDTH, LAYERS, BATCH = 2560, 4, 4


class BigMLP(ModelDesc):
    """LAYERS square matrices of WIDTH: 105 MB of float32 variables."""

    def inputs(self):
        return [tf.TensorSpec([BATCH, WIDTH], tf.float32, 'x')]

    def build_graph(self, x):
        for i in range(LAYERS):
            w = tf.get_variable('fc{}/W'.format(i), [WIDTH, WIDTH],
                                initializer=tf.random_normal_initializer(stddev=WIDTH ** -0.5))
            x = tf.nn.relu(tf.matmul(x, w))
        return tf.reduce_mean(tf.square(x), name='cost')

    def optimizer(self):
        return tf.train.GradientDescentOptimizer(1e-3)


class StepClock(Callback):
    """The time of every iteration (a step and its callbacks), by global step. Put it last."""

    def __init__(self):
        self.times, self._last = {}, None

    def _before_epoch(self):
        self._last = time.perf_counter()

    def _trigger_step(self):
        now = time.perf_counter()
        self.times[self.global_step] = now - self._last
        self._last = now


class TimedModelSaver(ModelSaver):
    """ModelSaver that records each save's wall time: from the trigger to its completion (the
    files, the resume state, the checkpoint list)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.save_times, self._started = [], {}

    def _trigger(self):
        self._started[self.global_step] = time.perf_counter()
        super()._trigger()

    def _complete(self, step, state, epoch_end, path):
        super()._complete(step, state, epoch_end, path)
        self.save_times.append(time.perf_counter() - self._started[step])


def run(mode, logdir, steps, every):
    """One training run; returns (iteration times by step, save wall times)."""
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        clock = StepClock()
        callbacks = [clock]
        saver = None
        if mode != 'none':
            saver = TimedModelSaver(max_to_keep=2, background=(mode == 'background'))
            callbacks = [PeriodicTrigger(saver, every_k_steps=every, every_k_epochs=None), clock]
        config = TrainConfig(model=BigMLP(), data=DummyConstantInput([[BATCH, WIDTH]]), callbacks=callbacks,
                             monitors=[], steps_per_epoch=steps, max_epoch=1)
        launch_train_with_config(config, SimpleTrainer())
    return clock.times, (saver.save_times[1:] if saver else [])   # the first save: warm-up


def _cycles(times, every):
    """The iteration times of a run in cycles of ``every`` steps that end with a trigger (the
    warm-up cycle, which holds the first save, left out): a list of lists."""
    last = max(times) // every * every
    return [[times[s] for s in range(end - every + 1, end + 1)] for end in range(2 * every, last + 1, every)]


def _summary(runs, every):
    """Medians over every cycle of every run: (quiet step, trigger step, other steps, whole cycle)."""
    cycles = [cycle for times, _ in runs for cycle in _cycles(times, every)]
    median = lambda values: statistics.median(values) * 1e3
    return (median([c[-2] for c in cycles]), median([c[-1] for c in cycles]),
            median([t for c in cycles for t in c[:-1]]), median([sum(c) for c in cycles]))


def stall_table(rounds, steps, every, tmp):
    modes = [('none', 'none'), ('background=False', 'sync'), ('background=True', 'background')]
    runs = {name: [] for name, _ in modes}
    for index in range(rounds):
        for name, mode in (modes if index % 2 == 0 else list(reversed(modes))):
            runs[name].append(run(mode, os.path.join(tmp, mode), steps, every))
    _, _, reference, reference_cycle = _summary(runs['none'], every)
    ms, ratio = '{:.1f}'.format, '{:.2f}'.format
    rows = [['none', ms(reference), '', '', '', ratio(1), ms(0), '']]
    for name, _ in modes[1:]:
        quiet, trigger, other, cycle = _summary(runs[name], every)
        save = statistics.median([t for _, save_times in runs[name] for t in save_times]) * 1e3
        rows.append([name, ms(quiet), ms(trigger), ms(trigger - quiet), ratio(trigger / quiet),
                     ratio(other / reference), ms(cycle - reference_cycle), ms(save)])
    return tabulate(rows, headers=['ModelSaver', 'step ms', 'trigger ms', 'stall ms', 'trigger/step',
                                   'others/none', 'cost/ckpt ms', 'save ms'],
                    disable_numparse=True, colalign=['left'] + ['right'] * 7)


# ----- what the data position adds ------------------------------------------------------------------

class MeasureResumeState(Callback):
    """From step ``start`` on, between two steps: times ``resume_state()`` and ``state.write``."""

    def __init__(self, prefix, start=5, repeat=20):
        self.prefix, self.start, self.repeat = prefix, start, repeat
        self.take, self.write, self.size, self.parts = [], [], None, None

    def _trigger_step(self):
        if self.global_step != self.start:
            return
        for _ in range(self.repeat):
            begin = time.perf_counter()
            state = self.trainer.resume_state()
            middle = time.perf_counter()
            path = state.write(self.prefix)
            self.take.append(middle - begin)
            self.write.append(time.perf_counter() - middle)
        self.size = os.path.getsize(path)
        self.parts = sorted(state.callbacks)


class TinyModel(ModelDesc):
    def __init__(self, shape):
        self.shape = shape

    def inputs(self):
        return [tf.TensorSpec((None,) + self.shape, tf.float32, 'image'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        size = int(np.prod(self.shape))
        logits = tf.matmul(tf.reshape(image, [-1, size]), tf.get_variable('fc/W', [size, 10]))
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        return tf.train.GradientDescentOptimizer(0.1)


def digits_pipeline():
    """examples/basics, tests/resume_scripts: the 1797 digits, shuffled, flipped, batches of 8."""
    from tensorpack_lite.dataflow.dataset import Digits
    train = Digits('train')
    train.reset_state()
    df = DataFromList([[image.astype('float32'), label] for image, label in train], shuffle=True)
    return BatchData(AugmentImageComponent(df, [imgaug.Flip(horiz=True)]), 8), (8, 8)


def cifar_size_pipeline():
    """CIFAR-10's size (examples/ResNet/cifar10-resnet.py): 50000 images (here 4x4x3), shuffled,
    flipped and cropped, batches of 128."""
    rng = np.random.RandomState(0)
    points = [[rng.rand(4, 4, 3).astype('float32'), np.int32(i % 10)] for i in range(50000)]
    df = DataFromList(points, shuffle=True)
    df = AugmentImageComponent(df, [imgaug.Flip(horiz=True), imgaug.RandomCrop((3, 3))])
    return BatchData(df, 128), (3, 3, 3)


def resume_state_table(tmp):
    rows = []
    for name, make in (('digits', digits_pipeline), ('50000 (CIFAR-10 size)', cifar_size_pipeline)):
        for source_name, source_cls in (('QueueInput', QueueInput), ('FeedInput', FeedInput)):
            with tf.Graph().as_default():
                logger.set_logger_dir(os.path.join(tmp, 'state'), action='d')
                df, shape = make()
                measure = MeasureResumeState(os.path.join(tmp, 'state', 'model-5'))
                config = TrainConfig(model=TinyModel(shape), data=source_cls(df), callbacks=[measure],
                                     monitors=[], steps_per_epoch=6, max_epoch=1)
                launch_train_with_config(config, SimpleTrainer())
            rows.append(['{} + {}'.format(name, source_name), statistics.median(measure.take) * 1e3,
                         statistics.median(measure.write) * 1e3, measure.size / 1024.,
                         ', '.join(measure.parts) or '(no callback state)'])
    return tabulate(rows, headers=['pipeline', 'resume_state() ms', 'write ms', '.resume KiB', 'states'],
                    floatfmt='.2f')


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--rounds', type=int, default=6, help='runs of each ModelSaver, in alternating order')
    parser.add_argument('--steps', type=int, default=120, help='steps per run')
    parser.add_argument('--every', type=int, default=10, help='a checkpoint every this many steps')
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '30')
    with tempfile.TemporaryDirectory() as tmp:
        stalls = stall_table(args.rounds, args.steps, args.every, tmp)
        states = resume_state_table(tmp)
    print("\nThe stall per checkpoint: {} MB of float32 variables, a save every {} steps, {} runs of {} "
          "steps each (medians; the first cycle of a run left out).".format(
              LAYERS * WIDTH * WIDTH * 4 // 10 ** 6, args.every, args.rounds, args.steps))
    print(stalls)
    print("\nWhat the resume state adds to a checkpoint (median of 20, between two steps):")
    print(states)


if __name__ == '__main__':
    main()
