"""A model with a ``tf.while_loop`` (helpers.WhileLoopRNN) trains with every trainer, with TF1
control flow (``tf.compat.v1.disable_v2_behavior()``: the loop is a ``Merge``/``NextIteration``
cycle) and with TF2's (a functional ``While`` op).

TF1 control flow is process-global, so its cases run in processes of their own: this module run
as a script (SimpleTrainer and the multi-tower trainers on 2 virtual CPU towers), 2-worker jobs
of distributed_scripts/train_tiny_multiworker.py and 2-rank MPI jobs of
horovod_scripts/train_tiny.py. Every run ends with finite costs and the weights of SimpleTrainer
on the batches of a step together, and backprop_order reads the loop's gradients in the order of
tests/graph_builder/test_backprop_order.py's rules (the last layer's first, then the loop's, then the input
layer's).

    python tests/train/test_trainers_while_loop.py OUT.json   # the TF1 cases (what the test runs)
"""

import json
import math
import os
import sys

import numpy as np
import pytest

from helpers.callbacks import RecordCost
from helpers.models import WhileLoopRNN, sequence_samples
from helpers.paths import TESTS_DIR
from helpers.processes import run_bounded, subprocess_env
from tensorpack_lite.callbacks import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.graph_builder.backprop_order import backprop_order
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.train import (SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                                   SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config)

HERE = TESTS_DIR
REPO = os.path.dirname(HERE)
RUN_TIMEOUT = 300       # a hang (the TF1 cases take seconds)
TOWERS, BATCH, STEPS, LR = 2, 4, 3, 0.1
"""Towers (or workers, or ranks) of BATCH datapoints each, STEPS steps of one epoch."""
CHIEF_SEED = 100
"""The initial weights of the scripts' chief (their INIT_SEED): the others start elsewhere."""
SAMPLES = sequence_samples(TOWERS * BATCH * STEPS)
TRAINERS = {
    'simple': SimpleTrainer,
    'replicated': lambda: SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1']),
    'ps': lambda: SyncMultiGPUTrainerParameterServer(['/cpu:0', '/cpu:1']),
}
ORDER = ['out/W', 'out/b', 'rnn/W_h', 'rnn/b', 'in/W']
"""backprop_order's order of WhileLoopRNN's gradients: the output layer's, the loop's, the
input projection's (inside each, the variables' order)."""


class ReadWeights(Callback):
    """The trainable variables (replicas included) when training ends."""

    def _after_train(self):
        variables = tfv1.trainable_variables()
        self.values = dict(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))


def loop_kind(graph):
    """'v1' for a Merge/NextIteration loop, 'v2' for a While op."""
    types = {op.type for op in graph.get_operations()}
    return 'v1' if 'NextIteration' in types else 'v2' if types & {'While', 'StatelessWhile'} else None


def gradient_order():
    """(loop kind, backprop_order of WhileLoopRNN's gradients as variable names)."""
    with tf.Graph().as_default() as graph:
        model = WhileLoopRNN()
        cost = model.build_graph(*[tfv1.placeholder(s.dtype, s.shape) for s in model.inputs()])
        variables = tfv1.trainable_variables()
        order = backprop_order(tf.gradients(cost, variables))
    return loop_kind(graph), [variables[i].op.name for i in order]


def train(name):
    """Train WhileLoopRNN with trainer ``name`` of :data:`TRAINERS` for one epoch of STEPS steps,
    SimpleTrainer on TOWERS x BATCH datapoints a step, the others on BATCH per tower; returns the
    loop kind, the costs of the steps and the final weights (as lists)."""
    costs, weights = RecordCost(), ReadWeights()
    batch = TOWERS * BATCH if name == 'simple' else BATCH
    config = get_default_sess_config()
    config.device_count['CPU'] = TOWERS
    with tf.Graph().as_default() as graph:
        launch_train_with_config(TrainConfig(
            model=WhileLoopRNN(seed=CHIEF_SEED, lr=LR),
            dataflow=BatchData(DataFromList(SAMPLES, shuffle=False), batch),
            callbacks=[costs, weights], monitors=[], steps_per_epoch=STEPS, max_epoch=1,
            session_config=config), TRAINERS[name]())
    return {'loop': loop_kind(graph), 'costs': costs.costs,
            'weights': {k: v.tolist() for k, v in weights.values.items()}}


def single_process_cases():
    """The order and each trainer's run, in this process's control flow."""
    kind, order = gradient_order()
    return {'order': order, 'order_loop': kind, 'runs': {name: train(name) for name in TRAINERS}}


@pytest.fixture(scope='module')
def reference():
    """SimpleTrainer's weights (TF2 control flow, in this process) and the TF2 cases."""
    cases = single_process_cases()
    return {k: np.asarray(v) for k, v in cases['runs']['simple']['weights'].items()}, cases


def assert_trains_like(weights, reference, atol=1e-5):
    """Every variable, replicas ``tower<k>/...`` included, equals its reference."""
    assert {name.split('/', 1)[1] if name.startswith('tower') else name for name in weights} == set(reference)
    for name, value in weights.items():
        base = name.split('/', 1)[1] if name.startswith('tower') else name
        np.testing.assert_allclose(np.asarray(value), reference[base], rtol=0, atol=atol, err_msg=name)


def assert_finite_costs(costs, steps=STEPS):
    assert len(costs) == steps and all(math.isfinite(c) for c in costs), costs


@pytest.mark.parametrize('control_flow', ['v2', 'v1'])
def test_single_process_trainers_train_a_while_loop(control_flow, reference, tmp_path):
    """backprop_order returns (in the order of its rules); SimpleTrainer, and the replicated and
    parameter-server trainers on 2 CPU towers, train the loop like SimpleTrainer on both towers'
    batches; with TF1 control flow (in a process of its own), the same weights as with TF2's."""
    weights, cases = reference
    if control_flow == 'v1':
        code, output = run_bounded([sys.executable, __file__, str(tmp_path / 'cases.json')], RUN_TIMEOUT,
                                   env=subprocess_env())
        assert code == 0, output[-6000:]
        cases = json.loads((tmp_path / 'cases.json').read_text())
    assert (cases['order_loop'], cases['order']) == (control_flow, ORDER)
    for name, run in cases['runs'].items():
        assert run['loop'] == control_flow, name
        assert_finite_costs(run['costs'])
        assert_trains_like(run['weights'], weights)
    assert len(cases['runs']['replicated']['weights']) == 2 * len(ORDER)      # a replica on each tower


def worker_args(control_flow):
    """The scripts' arguments: WhileLoopRNN, BATCH a worker, one epoch of STEPS steps."""
    args = ['--model', 'rnn', '--lr', LR, '--batch', BATCH, '--steps-per-epoch', STEPS, '--epochs', 1]
    return [str(a) for a in args] + (['--tf1'] if control_flow == 'v1' else [])


# both control flows on the collective trainer, which calls backprop_order (TF1 loops hung it); one
# each on the two parameter-server trainers, which build their towers alike (8 s a job)
@pytest.mark.parametrize('trainer, control_flow', [('collective', 'v1'), ('collective', 'v2'), ('ps', 'v2'),
                                                   ('replicated', 'v1')])
def test_a_two_worker_job_trains_a_while_loop(trainer, control_flow, reference, tmp_path):
    from helpers.distributed import Run, load_worker, train_tiny
    assert train_tiny.INIT_SEED == CHIEF_SEED
    run = Run(tmp_path, TOWERS, 0 if trainer == 'collective' else 1,
              ['--trainer', trainer] + worker_args(control_flow))
    assert run.code == 0, run.report()
    for k in range(TOWERS):
        worker = load_worker(tmp_path, k)
        assert worker['global_step'] == STEPS
        assert_finite_costs(worker['costs'])
        assert_trains_like(worker['weights'], reference[0])


@pytest.mark.parametrize('control_flow', ['v1', 'v2'])
def test_a_two_rank_mpi_job_trains_a_while_loop(control_flow, reference, tmp_path):
    pytest.importorskip('mpi4py', reason='the MPI engine needs mpi4py: pip install "tensorpack_lite[mpi]"')
    from helpers.mpi import MPIEXEC, load_rank, run_ranks, train_tiny
    if not os.path.exists(MPIEXEC):
        pytest.skip('no mpiexec next to {} (pip install "tensorpack_lite[mpi]" installs MPICH with '
                    'it)'.format(sys.executable))
    assert train_tiny.INIT_SEED == CHIEF_SEED
    code, output = run_ranks(TOWERS, tmp_path, *worker_args(control_flow))
    assert code == 0, output[-6000:]
    for rank in range(TOWERS):
        result = load_rank(tmp_path, rank)
        assert result['global_step'] == STEPS
        assert_finite_costs(result['costs'])
        assert_trains_like(result['weights'], reference[0])
    # the vote first; then, with TF2's resource variables, the gradients travel in backprop's order
    # (the output layer's first, the input's last); TF1's reference variables gate every gradient
    # on all of them (tests/train/test_tower_gradient_gate.py), so all are ready at once and they
    # travel in the variables' order
    calls = load_rank(tmp_path, 0)['allreduce_calls']
    shapes = [shape for call in calls for shape in call['shapes']]
    expected = {'v2': [[6, 3], [3], [6, 6], [6], [4, 6]], 'v1': [[4, 6], [6, 6], [6], [6, 3], [3]]}
    assert shapes == [[2]] + expected[control_flow], shapes


if __name__ == '__main__':
    tfv1.disable_v2_behavior()
    with open(sys.argv[1], 'w') as f:
        json.dump(single_process_cases(), f)
