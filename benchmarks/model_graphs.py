#!/usr/bin/env python
"""The training step of each real model (``real_model_zoo.py``) as this library's layers build it
against the graph tensorpack 0.11's layers build, in bare loops of one process.

Both graphs take the batch through placeholders of unknown batch size (as a ``ModelDesc``'s
inputs are) and are fed the same arrays, in sessions of the same config; blocks of steps run in
alternating order. What ``real_models.py`` compares besides the graph (the loop, the callbacks,
the input) is left out: a difference here is the graph's. Printed per model: the graphs' op
counts, the median steps/s of each, and the per-round ratios (this library's over tensorpack's):
median, range, and in how many rounds this library's was the faster.

``--against itself`` compares this library's graph with a second session of the same graph: how
far apart two sessions of one graph run on this machine, the floor under any comparison of
sessions (and so of ``real_models.py``'s paths, each a session of its own).

    /root/tpvenv/bin/python benchmarks/model_graphs.py --models resnet50-nhwc --rounds 8
    python benchmarks/model_graphs.py --models resnet50-nhwc --rounds 16 --against itself
"""

import os

os.environ.setdefault('TF_USE_LEGACY_KERAS', '1')   # tensorpack 0.11's tf.layers need Keras 2

import argparse  # noqa: E402
import statistics  # noqa: E402

from tensorpack_lite import tfv1 as tf  # noqa: E402
from tensorpack_lite.compat import enable_graph_mode  # noqa: E402
from tensorpack_lite.train import ModelDesc  # noqa: E402
from layer_graphs import library_layers, tensorpack  # noqa: E402
from real_model_zoo import MODELS  # noqa: E402
from real_models import STEPS, bare_batch, model_class, train_fetches  # noqa: E402
from timing import steps_per_second  # noqa: E402


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


def compare(name, rounds, against='tensorpack', warmup=3):
    """``(op counts, median rates, per-round ratios)`` of this library's step of model ``name``
    and of ``against``'s ('tensorpack', or 'itself': a second session of the same graph), the
    counts and rates as pairs in that order."""
    steps = (TrainingStep('tensorpack_lite', name),
             TrainingStep('tensorpack_lite' if against == 'itself' else against, name))
    try:
        for step in steps:
            for _ in range(warmup):   # the executors are built
                step()
        rates = ([], [])
        for round_index in range(rounds):
            for index in ((0, 1) if round_index % 2 == 0 else (1, 0)):
                rates[index].append(steps_per_second(steps[index], STEPS[name]))
    finally:
        for step in steps:
            step.session.close()
    ratios = [first / second for first, second in zip(*rates)]
    return (tuple(step.op_count for step in steps), tuple(statistics.median(r) for r in rates), ratios)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--models', default=','.join(MODELS),
                        help='comma-separated, of: ' + ', '.join(MODELS))
    parser.add_argument('--rounds', type=int, default=8)
    parser.add_argument('--against', choices=['tensorpack', 'itself'], default='tensorpack',
                        help="the second graph: tensorpack's, or this library's in a second session")
    args = parser.parse_args()
    if tensorpack is None and args.against == 'tensorpack':
        parser.error("needs tensorpack 0.11 importable (see real_models.py for the venv)")
    enable_graph_mode()
    print("TensorFlow {}, the second graph: {}".format(
        tf.__version__, 'tensorpack ' + tensorpack.__version__ if args.against == 'tensorpack'
        else "this library's, a second session"))
    print("{:<15} {:>13} {:>17} {:>7} {:>13} {:>7}".format(
        'model', 'ops 1st/2nd', 'steps/s 1st/2nd', 'paired', 'range', 'faster'))
    for name in args.models.split(','):
        ops, rates, ratios = compare(name, args.rounds, args.against)
        print("{:<15} {:>6}/{:<6} {:>8.3f}/{:<8.3f} {:>7.3f} {:>6.3f}-{:<6.3f} {:>3}/{:<3}".format(
            name, ops[0], ops[1], rates[0], rates[1], statistics.median(ratios), min(ratios), max(ratios),
            sum(r > 1 for r in ratios), len(ratios)), flush=True)


if __name__ == '__main__':
    main()
