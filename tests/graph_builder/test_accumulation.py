"""Gradient accumulation, ``TrainConfig(accumulate=K)`` (issue 60, item 1), in one process: K
micro-batches of b make exactly the update of one batch of K x b (SGD, momentum, Adam) on
SimpleTrainer and on 2 towers (parameter-server and replicated, each tower accumulating its own
batches); the optimizer's state advances once per update, the global step once per micro-batch;
a checkpoint taken in the middle of an update resumes it exactly; loss scaling (fp16) skips a
whole update whose gradients overflowed; the accumulate runs compute no reduction; BatchNorm's
statistics move with every micro-batch; bad values are refused naming the culprit."""

import numpy as np
import pytest

from helpers.models import DigitsMLPBase
from helpers.process_guard import starts_tensorflow_server_here

from tensorpack_lite.callbacks import Callback, RunUpdateOps
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import QueueInput
from tensorpack_lite.models import BatchNorm
from tensorpack_lite.cluster.config import local_cluster
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.dependency import ops_run_by
from tensorpack_lite.multiprocess.server import create_server
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.train import (AsyncMultiGPUTrainer, SimpleTrainer, SyncMultiGPUTrainerParameterServer,
                                   SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config)
from tensorpack_lite.train.distributed import (CollectiveAllReduceTrainer, DistributedTrainerParameterServer,
                                               DistributedTrainerReplicated)
from tensorpack_lite.utils import logger

pytestmark = starts_tensorflow_server_here   # servers made in this process

WEIGHTS = ['fc0/W', 'fc0/b', 'fc1/W', 'fc1/b']
MICRO, K = 6, 4


OPTIMIZERS = {'sgd': tfv1.train.GradientDescentOptimizer,
              'momentum': lambda lr: tfv1.train.MomentumOptimizer(lr, 0.9),
              'adam': lambda lr: tfv1.train.AdamOptimizer(0.01)}


class MLP(DigitsMLPBase):
    """The shared digits MLP with 12 hidden units and the optimizer named ``opt``."""

    def __init__(self, opt='sgd'):
        super().__init__(hidden=12, optimizer=OPTIMIZERS[opt])


def micro_batches(num, size, seed=0):
    rng = np.random.RandomState(seed)
    return [[rng.rand(size, 64).astype('float32'), rng.randint(0, 10, size).astype('int32')]
            for _ in range(num)]


def joined(batches, k):
    """Every k consecutive batches as one."""
    return [[np.concatenate([b[i] for b in batches[j:j + k]]) for i in range(2)]
            for j in range(0, len(batches), k)]


class CountRuns(Callback):
    """The op every step ran, by the fetch's name."""

    def __init__(self):
        self.fetched = []

    def _before_run(self, ctx):
        fetches = ctx.original_args.fetches
        self.fetched.append(getattr(fetches, 'name', str(fetches)))


def session_creator(cpus=1):
    config = get_default_sess_config()
    config.device_count['CPU'] = cpus
    return NewSessionCreator(config=config)


class ReadAll(Callback):
    """Every global variable's value after training, by name: ``values``."""

    values = None

    def _after_train(self):
        variables = tfv1.global_variables()
        self.values = dict(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))


def train(batches, trainer, accumulate=1, opt='sgd', extra=(), logdir=None, config_class=TrainConfig,
          cpus=1, steps=None, max_epoch=1, mixed_precision=None):
    """Train on ``batches`` in order (epochs of ``steps`` steps, all batches by default); every
    global variable's value at the end."""
    with tf.Graph().as_default():
        if logdir is not None:
            logger.set_logger_dir(str(logdir), action='k')
        try:
            reader = ReadAll()
            config = config_class(
                model=MLP(opt), data=QueueInput(DataFromList(batches, shuffle=False)),
                callbacks=list(extra) + [reader], extra_callbacks=[], monitors=[],
                steps_per_epoch=steps or len(batches), max_epoch=max_epoch,
                session_creator=session_creator(cpus), accumulate=accumulate, mixed_precision=mixed_precision)
            launch_train_with_config(config, trainer)
            return reader.values
        finally:
            if logdir is not None:
                logger.set_logger_dir(None)


def assert_same_weights(got, expected, atol=1e-6):
    for name in WEIGHTS:
        np.testing.assert_allclose(got[name], expected[name], rtol=0, atol=atol, err_msg=name)


@pytest.mark.parametrize('opt', ['sgd', 'momentum', 'adam'])
def test_simple_trainer_k_micro_batches_make_one_batch_k_times_larger(opt):
    batches = micro_batches(3 * K, MICRO)
    counter = CountRuns()
    got = train(batches, SimpleTrainer(), accumulate=K, opt=opt, extra=[counter])
    expected = train(joined(batches, K), SimpleTrainer(), opt=opt)
    assert_same_weights(got, expected)
    # the global step counts micro-batches; the optimizer's state advanced once per update
    assert got['global_step'] == 3 * K and expected['global_step'] == 3
    if opt == 'adam':
        assert got['beta1_power'] == pytest.approx(0.9 ** 4)     # 0.9 at the start, x 0.9 per update
        assert expected['beta1_power'] == pytest.approx(0.9 ** 4)
    if opt == 'momentum':
        np.testing.assert_allclose(got['fc0/W/Momentum'], expected['fc0/W/Momentum'], atol=1e-6)
    # K - 1 accumulate runs, then the update, three times
    update = [name for name in counter.fetched if 'accumulate_gradients' not in name]
    assert len(counter.fetched) == 3 * K and len(update) == 3
    assert [i for i, name in enumerate(counter.fetched) if name in update] == [K - 1, 2 * K - 1, 3 * K - 1]
    # without accumulation, the weights differ (the test would see a wrong K)
    single = train(batches[:3], SimpleTrainer(), opt=opt)
    assert np.abs(single['fc0/W'] - got['fc0/W']).max() > 1e-3


def ops_of_run(fetch):
    """Every op a run of ``fetch`` executes."""
    return set(ops_run_by([fetch]))


def op_types_of_run(fetch):
    """The types of the ops a run of ``fetch`` executes."""
    return {op.type for op in ops_of_run(fetch)}


class KeepOps(Callback):
    """The trainer's accumulate op and train op, once built."""

    def _setup_graph(self):
        self.accumulate_op = self.trainer.accumulator.accumulate_op
        self.train_op = self.trainer.train_op


def is_reduction_or_apply(op_type):
    return op_type.startswith(('Collective', 'NcclAllReduce', 'ResourceApply', 'Apply', 'AddN'))


TOWER_TRAINERS = {
    'parameter-server': lambda: SyncMultiGPUTrainerParameterServer(['/cpu:0', '/cpu:1'], ps_device='cpu'),
    'replicated': lambda: SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1']),
    'replicated-collective': lambda: SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='collective'),
}


@pytest.mark.parametrize('kind', sorted(TOWER_TRAINERS))
@pytest.mark.parametrize('opt', ['sgd', 'momentum', 'adam'])
def test_two_towers_accumulating_make_one_batch_of_every_micro_batch(kind, opt):
    """Each tower takes its own micro-batches from the queue (which tower gets which is not
    fixed); an update is the mean over the 2 x K micro-batches of its runs, reduced once."""
    batches = micro_batches(2 * 2 * K, MICRO)
    ops = KeepOps()
    got = train(batches, TOWER_TRAINERS[kind](), accumulate=K, opt=opt, extra=[ops], cpus=2, steps=2 * K)
    expected = train(joined(batches, 2 * K), SimpleTrainer(), opt=opt)
    assert_same_weights(got, expected, atol=2e-6)
    assert got['global_step'] == 2 * K
    assert not [t for t in op_types_of_run(ops.accumulate_op) if is_reduction_or_apply(t)]
    assert [t for t in op_types_of_run(ops.train_op) if is_reduction_or_apply(t)]


def test_async_towers_each_apply_their_own_accumulated_gradients():
    """AsyncMultiGPUTrainer: every tower applies the mean of its K micro-batches (divided by the
    number of towers) once per update, in the update's run only. For SGD that is the update of
    the 2 x K micro-batches, but for the race every asynchronous trainer has: in the run of an
    update one tower's apply may land before the other tower reads the weights for its last
    micro-batch's gradients (so close, not equal)."""
    batches = micro_batches(2 * 2 * K, MICRO)
    ops = KeepOps()
    got = train(batches, AsyncMultiGPUTrainer(['/cpu:0', '/cpu:1']), accumulate=K, cpus=2, steps=2 * K,
                extra=[ops])
    expected = train(joined(batches, 2 * K), SimpleTrainer())
    assert_same_weights(got, expected, atol=1e-3)
    assert not [t for t in op_types_of_run(ops.accumulate_op) if is_reduction_or_apply(t)]
    applies = [t for t in op_types_of_run(ops.train_op) if t.startswith(('ResourceApply', 'Apply'))]
    assert len(applies) >= 1


class BatchNormMLP(MLP):
    """BatchNorm on the inputs, then the MLP: its moving mean depends on the data alone."""

    def build_graph(self, image, label):
        return super().build_graph(BatchNorm('bn', image, momentum=0.9), label)


def test_batch_norm_statistics_move_with_every_micro_batch():
    """BatchNorm normalizes each micro-batch by its own statistics (as every accumulating framework
    does) and its moving averages take one step per micro-batch: after 8 micro-batches they are
    numpy's 8 steps of ``m = 0.9 m + 0.1 mean(micro-batch)``."""
    batches = micro_batches(2 * K, MICRO)
    with tf.Graph().as_default():
        reader = ReadAll()
        config = TrainConfig(model=BatchNormMLP(), data=QueueInput(DataFromList(batches, shuffle=False)),
                             callbacks=[RunUpdateOps(), reader], extra_callbacks=[], monitors=[],
                             steps_per_epoch=len(batches), max_epoch=1, session_creator=session_creator(),
                             accumulate=K)
        launch_train_with_config(config, SimpleTrainer())
    moving = np.zeros(64, np.float32)
    for image, _ in batches:
        moving = np.float32(0.9) * moving + np.float32(0.1) * image.mean(axis=0)
    np.testing.assert_allclose(reader.values['bn/mean/EMA'], moving, rtol=0, atol=1e-6)
    assert reader.values['global_step'] == 2 * K


def test_fp16_loss_scaling_skips_a_whole_update_whose_gradients_overflowed():
    """mixed_precision='fp16': the gradients accumulate scaled by the loss scale (which stays
    constant inside an update); the update checks the mean of the K: one micro-batch that
    overflows float16 skips its whole update, once, and halves the scale once, as the batch of K x b
    holding it does without accumulation."""
    batches = micro_batches(3 * K, MICRO)
    batches[K + 1][0] = batches[K + 1][0] * np.float32(3e4)      # the 2nd update's 2nd micro-batch overflows
    got = train(batches, SimpleTrainer(), accumulate=K, mixed_precision='fp16')
    expected = train(joined(batches, K), SimpleTrainer(), mixed_precision='fp16')
    for values in (got, expected):
        assert values['loss_scale/skipped_steps'] == 1
        assert values['loss_scale/scale'] == 2.0 ** 14
        assert values['loss_scale/good_steps'] == 1           # the 3rd update, counted once
    assert_same_weights(got, expected, atol=2e-3)              # float16 sums in another order
    untouched = train(batches[:K], SimpleTrainer(), accumulate=K, mixed_precision='fp16')
    # the skipped update left the weights as after the 1st one: the 3rd alone moved them since
    assert np.abs(got['fc0/W'] - untouched['fc0/W']).max() > 1e-4


@pytest.fixture(scope='module')
def worker_servers():
    """Worker 1's server of a cluster of 2 workers and one of 2 workers and a parameter server
    (never started: graphs only)."""
    return {num_ps: create_server(local_cluster(2, num_ps), 'worker', 1) for num_ps in (0, 1)}


READS = ('VarHandleOp', 'ReadVariableOp', 'Identity')


def communicates(op, task='/job:worker/task:1'):
    """A collective, or an op of another process (a parameter server's queue, an update of its
    variables) but a read of a variable."""
    elsewhere = not (op.device or task).startswith(task)
    return op.type.startswith(('Collective', 'Nccl')) or (elsewhere and op.type not in READS)


@pytest.mark.parametrize('trainer_class, num_ps', [(CollectiveAllReduceTrainer, 0),
                                                   (DistributedTrainerParameterServer, 1),
                                                   (DistributedTrainerReplicated, 1)])
def test_distributed_workers_accumulate_on_their_own_device_and_communicate_only_in_the_update(
        worker_servers, trainer_class, num_ps):
    """The graph of worker 1 of 2 with accumulate=4: its accumulators are local variables on its
    own device (not on a parameter server); the accumulate op sends nothing to other processes,
    no collective, no queue of the parameter servers, no apply; the update op does. (With
    DistributedTrainerParameterServer the weights live on the parameter server: every step
    reads them, as without accumulation; DistributedTrainerReplicated reads local replicas.)"""
    assert_worker_accumulates_alone(trainer_class(['/cpu:0'], worker_servers[num_ps]), len(WEIGHTS))


@pytest.mark.parametrize('trainer_class, num_ps', [(CollectiveAllReduceTrainer, 0),
                                                   (DistributedTrainerParameterServer, 1)])
def test_with_the_costs_carried_each_worker_accumulates_its_cost_alone_too(
        worker_servers, trainer_class, num_ps):
    """CHECK_COST = False: the cost travels with the update's reduction (for RollbackOnAnomaly),
    its mean over the update: one more accumulator, local too; the accumulate runs still send
    nothing."""
    trainer = trainer_class(['/cpu:0'], worker_servers[num_ps])
    trainer.CHECK_COST = False
    accumulator = assert_worker_accumulates_alone(trainer, len(WEIGHTS) + 1)
    (cost, mean), = accumulator.costs
    assert cost.op.name == 'tower0/cost' and trainer.protocol.cost_vote.costs_carried == [mean]


def assert_worker_accumulates_alone(trainer, accumulators):
    """Worker 1's graph, accumulate=4: ``accumulators`` local variables on its device; its
    accumulate op sends nothing, its update op does. Returns the accumulator."""
    with tf.Graph().as_default():
        trainer.accumulate = K
        model = MLP('momentum')
        source = QueueInput(DataFromList(micro_batches(2, MICRO)))
        trainer.setup_graph(model.get_input_signature(), source, model.build_graph, model.get_optimizer)
        accumulator = trainer.accumulator
        assert len(accumulator.variables) == accumulators
        local = set(tfv1.local_variables())
        for var in accumulator.variables:
            assert var in local and var.device.startswith('/job:worker/task:1'), (var.name, var.device)
        accumulate_ops = ops_of_run(accumulator.accumulate_op)
        sent = [op.name for op in accumulate_ops if communicates(op) or is_reduction_or_apply(op.type)]
        assert not sent
        assert [op.name for op in ops_of_run(trainer.train_op) if communicates(op)]
    return accumulator
