#!/usr/bin/env python
"""The training step of each real model (``real_model_zoo.py``) as this library's layers build it
against the graph tensorpack 0.11's layers build, in bare loops of one process.

Both graphs take the batch through placeholders of unknown batch size (as a ``ModelDesc``'s
inputs are) and are fed the same arrays, in sessions of the same config; blocks of steps run in
alternating order. What ``real_models.py`` compares besides the graph (the loop, the callbacks,
the input) is left out: a difference here is the graph's. Printed per model: the graphs' op
counts, the median steps/s of each, and the per-round ratios (this library's over tensorpack's):
median, range, and in how many rounds this library's was the faster.

    /root/tpvenv/bin/python benchmarks/model_graphs.py --models resnet50-nhwc --rounds 8
"""

import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')   # tensorpack 0.11's tf.layers need Keras 2

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from tensorpack_lite import tfv1 as tf  # noqa: E402
from tensorpack_lite.compat import enable_graph_mode  # noqa: E402
from tensorpack_lite.train import ModelDesc  # noqa: E402
from layer_graphs import library_layers, tensorpack  # noqa: E402
from real_model_zoo import MODELS  # noqa: E402
from real_models import STEPS, bare_batch, model_class, train_fetches  # noqa: E402


class TrainingStep:
    """One training step of model ``name`` built by ``library``'s layers ('tensorpack_lite' or
    'tensorpack'), in a graph and session of its own: call it to run a step."""

    def __init__(self, library, name):
        layers, tower = library_layers(library)
        base = ModelDesc if library == 'tensorpack_lite' else tensorpack.ModelDesc
        image_value, label_value = bare_batch(name)
        graph = tf.Graph()
        with graph.as_default():
            image = tf.placeholder(tf.float32, (None,) + image_value.shape[1:], name='image')
            label = tf.placeholder(tf.int32, [None], name='label')
            self._fetches = train_fetches(model_class(base, layers, name)(), tower(), image, label)
            self.session = tf.Session()
            self.session.run(tf.global_variables_initializer())
            graph.finalize()
        self.op_count = len(graph.get_operations())
        self._feed = {image: image_value, label: label_value}

    def __call__(self):
        self.session.run(self._fetches, self._feed)


def steps_per_second(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def compare(name, rounds, warmup=3):
    """``(op counts, median rates, per-round ratios)``, each ``{library: ...}`` but the ratios."""
    libraries = ('tensorpack_lite', 'tensorpack')
    steps = {library: TrainingStep(library, name) for library in libraries}
    try:
        for library in libraries:
            for _ in range(warmup):   # the executors are built
                steps[library]()
        rates = {library: [] for library in libraries}
        for round_index in range(rounds):
            for library in (libraries if round_index % 2 == 0 else reversed(libraries)):
                rates[library].append(steps_per_second(steps[library], STEPS[name]))
    finally:
        for step in steps.values():
            step.session.close()
    ratios = [lite / other for lite, other in zip(rates['tensorpack_lite'], rates['tensorpack'])]
    return ({library: steps[library].op_count for library in libraries},
            {library: statistics.median(rates[library]) for library in libraries}, ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', default=','.join(MODELS),
                        help='comma-separated, of: ' + ', '.join(MODELS))
    parser.add_argument('--rounds', type=int, default=8)
    args = parser.parse_args()
    if tensorpack is None:
        parser.error("needs tensorpack 0.11 importable (see real_models.py for the venv)")
    enable_graph_mode()
    print("TensorFlow {}, tensorpack {}".format(tf.__version__, tensorpack.__version__))
    print("{:<15} {:>13} {:>17} {:>7} {:>13} {:>7}".format(
        'model', 'ops lite/tp', 'steps/s lite/tp', 'paired', 'range', 'faster'))
    for name in args.models.split(','):
        ops, rates, ratios = compare(name, args.rounds)
        print("{:<15} {:>6}/{:<6} {:>8.3f}/{:<8.3f} {:>7.3f} {:>6.3f}-{:<6.3f} {:>3}/{:<3}".format(
            name, ops['tensorpack_lite'], ops['tensorpack'], rates['tensorpack_lite'], rates['tensorpack'],
            statistics.median(ratios), min(ratios), max(ratios), sum(r > 1 for r in ratios), len(ratios)),
            flush=True)


if __name__ == '__main__':
    main()
