"""A tiny regression model trained with HorovodTrainer, one copy per rank, for
tests/distributed/test_horovod.py (Horovod) and tests/distributed/test_mpi.py (MPI)::

    horovodrun -np 2 -H localhost:2 --gloo python train_tiny.py --out DIR [options]
    mpiexec -n 2 python train_tiny.py --out DIR [options]

Each rank trains on its share (RankShardData) of the same deterministic data and, when
training ends, writes ``DIR/rank<r>.json`` (its final weights, pid, how training ended); its log
(``DIR/rank<r>.log``) ends with the status it exits with (:data:`EXIT_MESSAGE`).
Rank r starts from its own initial weights (seed ``INIT_SEED + r``), so equal final weights
prove that rank 0's were broadcast. The test trains the same model on one process with
:func:`train_single` on the batches of both ranks concatenated, for comparison. On the MPI
engine, ``rank<r>.json`` also holds what each step all-reduced (``step_traffic``: calls and
bytes, from ``mpi_ops.traffic()``).
"""

import argparse
import hashlib
import json
import logging
import os
import signal
import sys

import numpy as np

from tensorpack_lite.callbacks import Callback, ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList, ShardedData
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.train import (AutoResumeTrainConfig, ModelDesc, StopTraining, TrainConfig,
                                   launch_train_with_config)
from tensorpack_lite.train.elastic import KeepGlobalBatch
from tensorpack_lite.utils import logger

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:     # run as a program (imported by the tests, tests/ is on the path already)
    sys.path.insert(0, TESTS)
from helpers.anomalies import add_rollback_arguments, poison_shard, rollback_callbacks  # noqa: E402  (tests/)
from helpers.callbacks import RecordCost  # noqa: E402
from helpers.models import WhileLoopRNN, add_model_arguments, sequence_samples  # noqa: E402
from helpers.shards import SHARD_OPTIONS, RecordIds, SampleIdsInput  # noqa: E402

INIT_SEED = 100
EXIT_MESSAGE = 'Rank {rank} exits with status {status}.'
"""The last line of a rank's log: what the process exits with, told from inside (a launcher
prints a rank's status only when it is not 0, and may end a rank itself)."""
FEATURES = 6
HIDDEN = 5
OPTIMIZERS = {
    'sgd': lambda lr: tfv1.train.GradientDescentOptimizer(lr),
    'momentum': lambda lr: tfv1.train.MomentumOptimizer(lr, 0.9),
    'adam': lambda lr: tfv1.train.AdamOptimizer(lr),
}


class TinyModel(ModelDesc):
    """6 -> 5 (tanh) -> 1, mean squared error, SGD with momentum by default (so slots are
    broadcast too; ``optimizer``: a key of OPTIMIZERS). With ``batch_norm`` (None: no BatchNorm;
    '' : one with the statistics of its own batch; 'horovod': synchronized across the ranks), a
    BatchNorm before the tanh."""

    def __init__(self, init_seed, lr, batch_norm=None, optimizer='momentum'):
        self.init_seed, self.lr, self.batch_norm = init_seed, lr, batch_norm
        self.optimizer_name = optimizer

    def inputs(self):
        return [tf.TensorSpec([None, FEATURES], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        rng = np.random.RandomState(self.init_seed)
        w0 = tfv1.get_variable('fc0/W', initializer=rng.randn(FEATURES, HIDDEN).astype('float32'))
        b0 = tfv1.get_variable('fc0/b', initializer=rng.randn(HIDDEN).astype('float32') * 0.1)
        w1 = tfv1.get_variable('fc1/W', initializer=rng.randn(HIDDEN, 1).astype('float32'))
        hidden = tf.matmul(x, w0) + b0
        if self.batch_norm is not None:
            from tensorpack_lite.models import BatchNorm
            hidden = BatchNorm('bn', hidden, momentum=0.5, sync_statistics=self.batch_norm or None)
        pred = tf.squeeze(tf.matmul(tf.tanh(hidden), w1), 1)
        cost = tf.reduce_mean(tf.square(pred - y), name='cost')
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        return OPTIMIZERS[self.optimizer_name](self.lr)


class TinyModelWithIds(SampleIdsInput, TinyModel):
    """:class:`TinyModel` with the datapoints' ids as a third input."""


def make_samples(num):
    """``num`` deterministic [x, y] datapoints."""
    rng = np.random.RandomState(0)
    x = rng.randn(num, FEATURES).astype('float32')
    y = np.sin(x @ rng.randn(FEATURES)).astype('float32')
    return [[a, b] for a, b in zip(x, y)]


class DumpWeights(Callback):
    """Runs on every rank: puts the rank as a scalar each epoch, and writes the final
    trainable weights when training ends (and the costs an :class:`EveryRankCost` recorded)."""

    _chief_only = False

    def __init__(self, path, rank, costs=None):
        self.path, self.rank, self.costs = path, rank, costs
        self.stopped = None
        self.step_hashes = []
        self.step_traffic = []      # (calls, bytes) all-reduced by each step, on the MPI engine
        self._traffic = None

    def _allreduced(self):
        from tensorpack_lite.graph_builder import mpi_ops
        return mpi_ops.traffic()['allreduce'] if self.trainer.hvd is mpi_ops else None

    def _before_train(self):
        self._traffic = self._allreduced()

    def _trigger_step(self):
        values = self.trainer.sess.run(tfv1.trainable_variables())
        self.step_hashes.append(hashlib.md5(b''.join(v.tobytes() for v in values)).hexdigest())
        if self._traffic is not None:
            now = self._allreduced()
            self.step_traffic.append(list(now - self._traffic))
            self._traffic = now

    def _trigger(self):
        self.trainer.monitors.put_scalar('rank', self.rank)

    def _after_train(self):
        variables = _weights_and_statistics()
        names = [v.op.name for v in variables]
        values = self.trainer.sess.run(variables)
        calls = [op for op in self.trainer.sess.graph.get_operations()
                 if op.type == 'PyFunc' and op.name.startswith('AllReduce/')]
        with open(self.path, 'w') as f:
            json.dump({'pid': os.getpid(), 'global_step': self.trainer.global_step,
                       'step_hashes': self.step_hashes, 'engine': self.trainer.engine,
                       'step_traffic': self.step_traffic,
                       'allreduce_calls': [{'name': op.name, 'shapes': [t.shape.as_list() for t in op.inputs],
                                            'after': [c.name for c in op.control_inputs]} for op in calls],
                       'local_rank': self.trainer.hvd.local_rank(),
                       'local_size': self.trainer.hvd.local_size(),
                       'costs': None if self.costs is None else self.costs.costs,
                       'weights': {n: v.tolist() for n, v in zip(names, values)}}, f)


class EveryRankCost(RecordCost):
    """The cost of every step, on every rank (helpers.RecordCost is rank 0's)."""

    _chief_only = False


class StopAtStep(Callback):
    """Chief-only: ends training on rank 0 after ``step`` steps."""

    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.trainer.global_step >= self.step:
            raise StopTraining("rank 0 stops at step {}".format(self.step))


class DieAtStep(Callback):
    """Runs on every rank; at ``step`` on rank ``rank``, SIGKILLs this process (or raises)."""

    _chief_only = False

    def __init__(self, step, rank, fail=False):
        self.step, self.rank, self.fail = step, rank, fail

    def _trigger_step(self):
        if self.trainer.rank == self.rank and self.trainer.global_step >= self.step:
            if self.fail:
                raise ValueError("rank {} fails at step {}".format(self.rank, self.step))
            os.kill(os.getpid(), signal.SIGKILL)


class SigtermAtStep(Callback):
    """Runs on every rank; after global step ``step``, rank ``rank`` sends itself SIGTERM (its
    machine is preempted)."""

    _chief_only = False

    def __init__(self, step, rank):
        self.step, self.rank = step, rank

    def _trigger_step(self):
        if self.trainer.rank == self.rank and self.trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class ChiefOnlyVariable(Callback):
    """Chief-only and creates a variable: makes rank 0's graph differ from the others'."""

    def _setup_graph(self):
        tfv1.get_variable('only_on_chief', initializer=1.0)


def assert_stopped_together(out_dir, num, preempted, step, until='the next step'):
    """For the tests: rank ``preempted`` voted (to stop after ``until``), every rank of ``num``
    logged its stop after global step ``step`` (in OUT/rank<r>.log) and rank 0 saved model-<step>."""
    import re
    logs = [open(os.path.join(str(out_dir), 'rank{}.log'.format(r))).read() for r in range(num)]
    voted = 'Rank {} voted to stop: every process stops after {}.'.format(preempted, until)
    assert voted in logs[preempted], logs[preempted][-3000:]
    for rank, log in enumerate(logs):
        cause = 'this rank' if rank == preempted else 'another rank'
        stopped = (r'Training was preempted \(SIGTERM\) after global step {0} \(preempted: {1} received '
                   r'SIGTERM; every rank stops after global step {0}\)').format(step, cause)
        assert re.search(stopped, log), log[-3000:]
    assert re.search(r'Model saved to .*model-{}\.'.format(step), logs[0]), logs[0][-3000:]


def _weights_and_statistics():
    """The trainable variables, then the model variables that are not (BatchNorm's moving averages)."""
    trainable = tfv1.trainable_variables()
    return trainable + [v for v in tfv1.model_variables() if v not in trainable]


def train_single(samples, batch, lr, steps_per_epoch, max_epoch, batch_norm=None, optimizer='momentum',
                 accumulate=1):
    """The reference: SimpleTrainer on one process, ``batch`` datapoints per step (``accumulate``
    steps per update); returns the final trainable weights (and moving averages) by variable name."""
    from tensorpack_lite.train import SimpleTrainer
    model = TinyModel(INIT_SEED, lr, batch_norm, optimizer)
    result = {}

    class ReadWeights(Callback):
        def _after_train(self):
            variables = _weights_and_statistics()
            result.update(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))

    config = TrainConfig(model=model, dataflow=BatchData(DataFromList(samples, shuffle=False), batch),
                         callbacks=[ReadWeights()], monitors=[], steps_per_epoch=steps_per_epoch,
                         max_epoch=max_epoch, accumulate=accumulate)
    launch_train_with_config(config, SimpleTrainer())
    return result


def accumulated_reference(replicas, accumulate, batch, steps_per_epoch, max_epoch, lr, optimizer):
    """The reference of a run of ``replicas`` (ranks x towers), each taking ``accumulate``
    micro-batches of ``batch`` per update: one process whose every step is an update on the
    combined batch of ``replicas * accumulate * batch`` datapoints, in the order the replicas'
    shares (RankShardData) take them."""
    samples = make_samples(steps_per_epoch * batch * replicas)
    if steps_per_epoch % accumulate:
        raise ValueError("accumulated_reference: {} steps per epoch are not whole updates of {}".format(
            steps_per_epoch, accumulate))
    return train_single(samples, replicas * accumulate * batch, lr, steps_per_epoch // accumulate, max_epoch,
                        optimizer=optimizer)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--out', required=True, help='directory for rank<r>.json')
    parser.add_argument('--logdir', help='logger directory (rank<r> is appended with --per-rank-logdir)')
    parser.add_argument('--per-rank-logdir', action='store_true')
    parser.add_argument('--resume', action='store_true', help='AutoResumeTrainConfig')
    parser.add_argument('--batch', type=int, default=4, help='per rank')
    parser.add_argument('--steps-per-epoch', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=2)
    parser.add_argument('--lr', type=float, default=0.05)
    parser.add_argument('--optimizer', choices=sorted(OPTIMIZERS), default='momentum')
    parser.add_argument('--accumulate', type=int, default=1,
                        help='TrainConfig(accumulate=): micro-batches (steps) per update')
    parser.add_argument('--sum', action='store_true', help='sum the gradients instead of averaging')
    parser.add_argument('--fp16', action='store_true', help='fp16 gradient compression')
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'], help='TrainConfig(mixed_precision=)')
    parser.add_argument('--stop-at-step', type=int, help='rank 0 stops training after this step')
    parser.add_argument('--chief-only-variable', action='store_true')
    parser.add_argument('--no-epoch-broadcast', action='store_true',
                        help='broadcast the variables at the start only (not at each epoch end)')
    parser.add_argument('--die', type=int, nargs=2, metavar=('RANK', 'STEP'),
                        help='rank RANK kills itself (SIGKILL) at step STEP')
    parser.add_argument('--sync-batch-norm', action='store_true',
                        help="a BatchNorm(sync_statistics='horovod') in the model")
    parser.add_argument('--sigterm', type=int, nargs=2, metavar=('RANK', 'STEP'),
                        help='rank RANK receives SIGTERM after global step STEP')
    parser.add_argument('--fail', type=int, nargs=2, metavar=('RANK', 'STEP'),
                        help='rank RANK raises an error at step STEP')
    parser.add_argument('--towers', type=int,
                        help="towers inside each rank, on virtual CPU devices (HorovodTrainer(gpus=...)); "
                             "each tower takes --batch datapoints")
    parser.add_argument('--rank-towers', type=int, nargs=2, metavar=('RANK', 'TOWERS'),
                        help='rank RANK builds TOWERS towers instead of --towers')
    parser.add_argument('--raise-before-training', type=int, metavar='RANK',
                        help='rank RANK raises an exception after the engine started, before training')
    parser.add_argument('--data', help="shards:URL: train on ShardedData(URL) of helpers.shards.with_ids("
                                       "make_samples(...)); each step's ids go to OUT/ids-rank<r>.jsonl")
    parser.add_argument('--keep-global-batch', type=int, metavar='BATCH',
                        help='AutoResumeTrainConfig(elastic=KeepGlobalBatch(BATCH)), which sets --batch')
    add_model_arguments(parser, 'rank')
    add_rollback_arguments(parser, 'rank')
    return parser.parse_args(argv)


def main(argv):
    from tensorpack_lite.train.horovod_trainer import HorovodTrainer, RankShardData, import_engine
    args = parse_args(argv)
    if args.tf1:
        tfv1.disable_v2_behavior()
    hvd, _ = import_engine()
    if args.rank_towers:
        hvd.init()   # (again in HorovodTrainer: hvd.init() may be called twice)
        if hvd.rank() == args.rank_towers[0]:
            args.towers = args.rank_towers[1]
    gpus = None if args.towers is None else ['/cpu:{}'.format(k) for k in range(args.towers)]
    trainer = HorovodTrainer(average=not args.sum,
                             compression=hvd.Compression.fp16 if args.fp16 else None, gpus=gpus)
    if args.no_epoch_broadcast:
        trainer.BROADCAST_EVERY_EPOCH = False
    # Every rank's messages go to OUT/rank<r>.log too: what a rank logs right before MPI_Abort
    # can be missing from mpiexec's output (hydra stops forwarding as it ends the job).
    logging.getLogger('tensorpack_lite').addHandler(
        logging.FileHandler(os.path.join(args.out, 'rank{}.log'.format(trainer.rank))))
    _ranks_logging.append(trainer.rank)
    if args.raise_before_training == trainer.rank:
        raise RuntimeError("rank {} fails before training (--raise-before-training)".format(trainer.rank))
    if args.logdir:   # on every rank: HorovodTrainer keeps ranks > 0 from writing there
        logdir = args.logdir
        if args.per_rank_logdir:
            logdir = os.path.join(logdir, 'rank{}'.format(trainer.rank))
        logger.set_logger_dir(logdir, action='k')
    policy = None
    if args.keep_global_batch:
        policy = KeepGlobalBatch(args.keep_global_batch)
        args.batch = policy.per_replica_batch(trainer)
    num = args.steps_per_epoch * args.batch * trainer.size * (args.towers or 1)
    samples = make_samples(num) if args.model == 'tiny' else sequence_samples(num)
    samples = poison_shard(samples, args, trainer.size, args.batch * trainer.size * (args.towers or 1))
    df = RankShardData(DataFromList(samples, shuffle=False), trainer.rank, trainer.size)
    if args.data:
        df = ShardedData(args.data.partition('shards:')[2], **SHARD_OPTIONS)   # the share: the trainer's
    df = BatchData(df, args.batch)
    costs = EveryRankCost() if args.model == 'rnn' else None
    callbacks = [DumpWeights(os.path.join(args.out, 'rank{}.json'.format(trainer.rank)), trainer.rank, costs)]
    if costs is not None:
        callbacks.insert(0, costs)
    callbacks[:0] = rollback_callbacks(args, trainer, args.out, trainer.rank)
    if args.data:
        callbacks.insert(0, RecordIds(os.path.join(args.out, 'ids-rank{}.jsonl'.format(trainer.rank))))
    if args.logdir:
        callbacks.append(ModelSaver())
    if args.stop_at_step:
        callbacks.append(StopAtStep(args.stop_at_step))
    if args.chief_only_variable:
        callbacks.append(ChiefOnlyVariable())
    if args.die:
        callbacks.append(DieAtStep(args.die[1], args.die[0]))
    if args.fail:
        callbacks.append(DieAtStep(args.fail[1], args.fail[0], fail=True))
    if args.sigterm:
        callbacks.append(SigtermAtStep(args.sigterm[1], args.sigterm[0]))
    if args.model == 'rnn':
        model = WhileLoopRNN(seed=INIT_SEED + trainer.rank, lr=args.lr)
    else:
        model = (TinyModelWithIds if args.data else TinyModel)(
            INIT_SEED + trainer.rank, args.lr, 'horovod' if args.sync_batch_norm else None, args.optimizer)
    session_config = None if args.towers is None else tfv1.ConfigProto(device_count={'CPU': args.towers})
    config = (TrainConfig if policy is None and not args.resume else AutoResumeTrainConfig)(
        model=model, dataflow=df, callbacks=callbacks, session_config=session_config,
        steps_per_epoch=args.steps_per_epoch, max_epoch=args.epochs, mixed_precision=args.mixed_precision,
        elastic=policy, accumulate=args.accumulate)
    launch_train_with_config(config, trainer)


_ranks_logging = []     # this process's rank, once its log is OUT/rank<r>.log


def run_and_say_the_exit(argv):
    """:func:`main`, then the status this process exits with as the last line of its log."""
    status = 0
    try:
        main(argv)
    except SystemExit as exit:      # Preempted: 143
        status = exit.code if isinstance(exit.code, int) else 1
        raise
    except BaseException:
        status = 1
        raise
    finally:
        if _ranks_logging:
            logger.info(EXIT_MESSAGE.format(rank=_ranks_logging[0], status=status))


if __name__ == '__main__':
    run_and_say_the_exit(sys.argv[1:])
