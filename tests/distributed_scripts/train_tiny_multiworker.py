"""A tiny regression model trained by one task of a cluster, for tests/distributed/test_trainers.py.

    TF_CONFIG=... python train_tiny_multiworker.py --trainer collective --out DIR [options]

Every process of the cluster runs it (the launcher sets TF_CONFIG). Worker k
trains on its share (RankShardData) of the same deterministic data and, when training ends,
writes ``DIR/worker<k>.json``: its trainable variables (replicas included), global step and
pid. Worker k starts from its own initial weights (seed ``INIT_SEED + k``), so equal final
weights show that the chief's were used. With ``--data shards:URL`` it trains on a
ShardedData of ``helpers.shards.with_ids(make_samples(N))`` instead (the trainer gives it its
share) and appends the sample ids of every step to ``DIR/ids-worker<k>.jsonl``.
:func:`train_single` trains the same model in one process on the batches of every tower of
every worker together, for comparison.
"""

import argparse
import json
import os
import signal
import sys
import time

import numpy as np

from tensorpack_lite.callbacks.early_stopping import EarlyStopping
from tensorpack_lite.callbacks.saver import ModelSaver
from tensorpack_lite.callbacks.trigger import PeriodicTrigger
from tensorpack_lite.callbacks.weight_average import WeightAverage
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList, ShardedData
from tensorpack_lite.models import BatchNorm
from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.train import AutoResumeTrainConfig, ModelDesc, TrainConfig, launch_train_with_config
from tensorpack_lite.train.elastic import KeepGlobalBatch, NoAdjustment, ScaleLearningRate
from tensorpack_lite.utils import logger
from tensorpack_lite.utils.utils import fix_rng_seed

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:     # run as a program (imported by the tests, tests/ is on the path already)
    sys.path.insert(0, TESTS)
from helpers.anomalies import add_rollback_arguments, poison_shard, rollback_callbacks  # noqa: E402  (tests/)
from helpers.breaking_session import BreakSessionAt  # noqa: E402
from helpers.callbacks import RecordCost  # noqa: E402
from helpers.models import WhileLoopRNN, add_model_arguments, sequence_samples  # noqa: E402
from helpers.shards import SHARD_OPTIONS, RecordIds, SampleIdsInput  # noqa: E402

INIT_SEED = 100
FEATURES = 6
OVERFLOW_Y = 100.0


OPTIMIZERS = {
    'sgd': lambda lr: tfv1.train.GradientDescentOptimizer(lr),
    'momentum': lambda lr: tfv1.train.MomentumOptimizer(lr, 0.9),
    'adam': lambda lr: tfv1.train.AdamOptimizer(lr),
    'rmsprop': lambda lr: tfv1.train.RMSPropOptimizer(lr, momentum=0.5),
}


class TinyModel(ModelDesc):
    """6 -> hidden (tanh) -> 1, mean squared error, one of :data:`OPTIMIZERS` (by default SGD
    with momentum: slots are synced too)."""

    def __init__(self, init_seed, lr, hidden, optimizer='momentum', batch_norm=None, lr_variable=False):
        self.init_seed, self.lr, self.hidden, self.optimizer_name = init_seed, lr, hidden, optimizer
        self.batch_norm = batch_norm     # None, or BatchNorm's sync_statistics ('' for none)
        self.lr_variable = lr_variable   # the rate in a variable 'learning_rate' (ScaleLearningRate)

    def inputs(self):
        return [tf.TensorSpec([None, FEATURES], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        rng = np.random.RandomState(self.init_seed)
        w0 = tfv1.get_variable('fc0/W', initializer=rng.randn(FEATURES, self.hidden).astype('float32'))
        b0 = tfv1.get_variable('fc0/b', initializer=rng.randn(self.hidden).astype('float32') * 0.1)
        w1 = tfv1.get_variable('fc1/W', initializer=(rng.randn(self.hidden, 1) / np.sqrt(self.hidden))
                               .astype('float32'))
        hidden = tf.matmul(x, w0) + b0
        if self.batch_norm is not None:
            hidden = BatchNorm('bn', hidden, momentum=0.8, ema_update='internal',
                               sync_statistics=self.batch_norm or None)
        pred = tf.squeeze(tf.matmul(tf.tanh(hidden), w1), 1)
        cost = tf.reduce_mean(tf.square(pred - y), name='cost')
        add_moving_summary(cost)
        return cost

    def optimizer(self):
        lr = self.lr
        if self.lr_variable:
            lr = tfv1.get_variable('learning_rate', initializer=float(lr), trainable=False)
        return OPTIMIZERS[self.optimizer_name](lr)


class TinyModelWithIds(SampleIdsInput, TinyModel):
    """:class:`TinyModel` with the datapoints' ids as a third input."""


class StopAtStep(Callback):
    """Chief-only: asks every worker to stop (``request_stop``) after global step ``step``."""

    def __init__(self, step):
        self.step = step

    def _trigger_step(self):
        if self.global_step == self.step:
            self.trainer.request_stop("asked to stop at step {}".format(self.step))


def make_samples(num):
    """``num`` deterministic [x, y] datapoints."""
    rng = np.random.RandomState(0)
    x = rng.randn(num, FEATURES).astype('float32')
    y = np.sin(x @ rng.randn(FEATURES)).astype('float32')
    return [[a, b] for a, b in zip(x, y)]


def trained_variables():
    """The trainable variables and the moving averages of the main tower."""
    return tfv1.trainable_variables() + tfv1.get_collection(tfv1.GraphKeys.MODEL_VARIABLES)


class DumpWeights(Callback):
    """On every worker: writes the trainable variables when training ends (and whether the
    file ``marker`` exists then, the costs an :class:`EveryWorkerCost` recorded, and the weight
    averages of a WeightAverage)."""

    _chief_only = False

    def __init__(self, path, marker=None, costs=None):
        self.path, self.marker, self.costs = path, marker, costs

    def _after_train(self):
        variables = trained_variables()
        values = self.trainer.sess.run(variables)
        scale = getattr(self.trainer, 'loss_scale', None)
        scale = None if scale is None else self.trainer.sess.run([scale.scale, scale.skipped_steps])
        averages = [v for v in tfv1.global_variables() if v.op.name.startswith('WeightAverage/')]
        averaged = self.trainer.sess.run(averages)
        with open(self.path, 'w') as f:
            json.dump({'pid': os.getpid(), 'global_step': self.trainer.global_step,
                       'loss_scale': None if scale is None else [float(scale[0]), int(scale[1])],
                       'marker_existed': bool(self.marker and os.path.exists(self.marker)),
                       'costs': None if self.costs is None else self.costs.costs,
                       'weights': {v.op.name: x.tolist() for v, x in zip(variables, values)},
                       'averages': {v.op.name: np.asarray(x).tolist()
                                    for v, x in zip(averages, averaged)}}, f)


class EveryWorkerCost(RecordCost):
    """The cost of every step, on every worker (helpers.RecordCost is the chief's)."""

    _chief_only = False


class HoldAfterLastStep(Callback):
    """Right after the last training step (before training ends), waits ``seconds`` (or until
    the file ``release`` exists, when given), then creates the file ``marker``."""

    _chief_only = False

    def __init__(self, seconds, marker, release=None):
        self.seconds, self.marker, self.release = seconds, marker, release

    def _after_run(self, run_context, run_values):
        loop = self.trainer.loop
        if loop.epoch_num == loop.max_epoch and loop.local_step == loop.steps_per_epoch - 1:
            deadline = time.monotonic() + self.seconds
            while time.monotonic() < deadline and not (self.release and os.path.exists(self.release)):
                time.sleep(0.05)
            open(self.marker, 'w').close()


class DieAtStep(Callback):
    """Kills its own process (SIGKILL) once the global step reaches ``step``; with ``marker``
    only if that file does not exist yet (it is created first: the process dies once)."""

    _chief_only = False

    def __init__(self, step, marker=None):
        self.step, self.marker = step, marker

    def _trigger_step(self):
        if self.trainer.global_step < self.step:
            return
        if self.marker is not None:
            if os.path.exists(self.marker):
                return
            open(self.marker, 'w').close()
        os.kill(os.getpid(), signal.SIGKILL)


class ChiefDiesSaving(ModelSaver):
    """The chief's ModelSaver, SIGKILLed while it writes the checkpoint of global step ``step``,
    between the data file and the index (the state file still names the previous checkpoint).
    Once: the file ``marker`` is created first."""

    def __init__(self, step, marker):
        super().__init__()
        self.step, self.marker = step, marker

    def _trigger(self):
        if self.global_step != self.step or os.path.exists(self.marker):
            return super()._trigger()
        open(self.marker, 'w').close()
        path = self.saver.save(self.trainer.sess, self.path, global_step=self.step,
                               write_meta_graph=False, write_state=False)
        os.remove(path + '.index')
        os.kill(os.getpid(), signal.SIGKILL)


class PauseAtStep(Callback):
    """After global step ``step`` (once: while ``OUT/go`` does not exist), creates ``OUT/paused``
    and waits up to 120 s for the test to create ``OUT/go`` (e.g. once it has seen a signal
    arrive)."""

    _chief_only = False

    def __init__(self, step, out):
        self.step, self.out = step, out

    def _trigger_step(self):
        go = os.path.join(self.out, 'go')
        if self.global_step != self.step or os.path.exists(go):
            return
        open(os.path.join(self.out, 'paused'), 'w').close()
        deadline = time.monotonic() + 120
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.05)


class HoldAtStep(PauseAtStep):
    """As PauseAtStep, with files of its step: after global step ``step`` (once: while
    ``OUT/go-<step>`` does not exist), creates ``OUT/held-<step>`` and waits up to 300 s for
    ``OUT/go-<step>``. Several may be given (tests/cluster/test_ray.py acts at each)."""

    def _trigger_step(self):
        go = os.path.join(self.out, 'go-{}'.format(self.step))
        if self.global_step != self.step or os.path.exists(go):
            return
        open(os.path.join(self.out, 'held-{}'.format(self.step)), 'w').close()
        deadline = time.monotonic() + 300
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.05)


class ScriptedScore(Callback):
    """Puts the statistic 'score' at each epoch's end: ``values[epoch - 1]`` (for EarlyStopping)."""

    def __init__(self, values):
        self.values = values

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar('score', self.values[self.epoch_num - 1])

    def _stat_names(self):
        return ['score']


class ChiefCutWhileSaving(ModelSaver):
    """The chief's ModelSaver; at global step ``step`` it creates the file ``OUT/saving`` and
    waits (up to 120 s) for the file ``OUT/cut`` (the test cuts the chief's link, then creates
    it) before it saves: the checkpoint is written with the link cut. Once (``OUT/saving``)."""

    def __init__(self, step, out):
        super().__init__()
        self.step, self.out = step, out

    def _trigger(self):
        saving = os.path.join(self.out, 'saving')
        if self.global_step == self.step and not os.path.exists(saving):
            open(saving, 'w').close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(self.out, 'cut')) and time.monotonic() < deadline:
                time.sleep(0.05)
        return super()._trigger()


class ChiefLosesData(Callback):
    """At global step ``step + 1``, after epoch ``step``'s checkpoint was listed and its end
    recorded: cuts that checkpoint's data file to half (a crash that lost writes not yet on
    disk) and SIGKILLs the process. Once: the file ``marker`` is created first."""

    def __init__(self, step, marker):
        self.step, self.marker = step, marker

    def _trigger_step(self):
        if self.global_step != self.step + 1 or os.path.exists(self.marker):
            return
        open(self.marker, 'w').close()
        data = os.path.join(logger.get_logger_dir(), 'model-{}.data-00000-of-00001'.format(self.step))
        os.truncate(data, os.path.getsize(data) // 2)
        os.kill(os.getpid(), signal.SIGKILL)


def train_single(samples, batch, lr, hidden, steps_per_epoch, max_epoch, optimizer='momentum',
                 batch_norm=None, accumulate=1):
    """The reference: SimpleTrainer in this process, ``batch`` datapoints per step (``accumulate``
    steps per update); returns the final trainable weights by variable name."""
    from tensorpack_lite.train import SimpleTrainer
    result = {}

    class ReadWeights(Callback):
        def _after_train(self):
            variables = trained_variables()
            result.update(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))

    config = TrainConfig(model=TinyModel(INIT_SEED, lr, hidden, optimizer, batch_norm),
                         dataflow=BatchData(DataFromList(samples, shuffle=False), batch),
                         callbacks=[ReadWeights()], monitors=[], steps_per_epoch=steps_per_epoch,
                         max_epoch=max_epoch, accumulate=accumulate)
    launch_train_with_config(config, SimpleTrainer())
    return result


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--trainer', choices=['collective', 'ps', 'replicated'], required=True)
    parser.add_argument('--out', required=True, help='directory for worker<k>.json')
    parser.add_argument('--logdir', help="the chief's logger directory")
    parser.add_argument('--per-worker-logdir', action='store_true',
                        help='every worker sets the logger directory LOGDIR/worker<k>')
    parser.add_argument('--shared-logdir', action='store_true',
                        help='every worker sets the logger directory LOGDIR')
    parser.add_argument('--data', help="shards:URL: train on ShardedData(URL) of helpers.shards.with_ids("
                                       "make_samples(...)) (RecordIds)")
    parser.add_argument('--save-every-steps', type=int,
                        help='ModelSaver every N global steps (and at the end)')
    parser.add_argument('--stop-at-step', type=int,
                        help="the chief asks every worker to stop after this step")
    parser.add_argument('--towers', type=int, default=1, help='CPU devices (towers) per worker')
    parser.add_argument('--batch', type=int, default=4, help='per tower')
    parser.add_argument('--hidden', type=int, default=5)
    parser.add_argument('--shuffle', action='store_true',
                        help='DataFromList(shuffle=True), the same seed on every worker (fix_rng_seed)')
    parser.add_argument('--samples', type=int,
                        help='datapoints in all (default: steps per epoch x the global batch)')
    parser.add_argument('--steps-per-epoch', type=int, default=3)
    parser.add_argument('--epochs', type=int, default=1)
    parser.add_argument('--lr', type=float, default=0.05)
    parser.add_argument('--optimizer', choices=sorted(OPTIMIZERS), default='momentum')
    parser.add_argument('--batch-norm', choices=['none', 'horovod', 'nccl'],
                        help="a BatchNorm layer with this sync_statistics ('none': None)")
    parser.add_argument('--accumulate', type=int, default=1,
                        help='TrainConfig(accumulate=): micro-batches per update')
    parser.add_argument('--sum', action='store_true', help='sum the gradients (collective)')
    parser.add_argument('--compression', choices=['fp16', 'bf16'], help='gradient compression (collective)')
    parser.add_argument('--exchange', choices=['collective'], default='collective',
                        help='how gradients cross workers (collective)')
    parser.add_argument('--no-epoch-broadcast', action='store_true',
                        help="collective: no copy of the chief's variables at each epoch's end")
    parser.add_argument('--worker1-holds', type=float,
                        help='worker 1 waits this long after its last step, then creates a marker file')
    parser.add_argument('--die-at-step', type=int, help='worker 1 SIGKILLs itself at this global step')
    parser.add_argument('--die-task', type=int, default=1, help='with --die-at-step: the worker that dies')
    parser.add_argument('--elastic', help="TrainConfig(elastic=): 'keep:GLOBAL_BATCH' (KeepGlobalBatch, "
                                          "which sets the batch), 'scale:REFERENCE_SIZE' or 'none'")
    parser.add_argument('--break-session-at-step', type=int,
                        help="worker 1's session breaks in this step (helpers.BreakingSession)")
    parser.add_argument('--die-once', action='store_true',
                        help='with --die-at-step: only the first run that gets there (marker OUT/died-once)')
    parser.add_argument('--pause-at-step', type=int, help='see PauseAtStep')
    parser.add_argument('--hold-at-step', type=int, action='append', default=[],
                        help='see HoldAtStep (repeat for several steps)')
    parser.add_argument('--early-stop', help="PATIENCE:V1,V2,...: the chief's EarlyStopping('score', "
                        "patience=PATIENCE) on the score V<epoch> (ScriptedScore)")
    parser.add_argument('--weight-average', type=float, help='WeightAverage(DECAY, every_k_steps=2) first')
    parser.add_argument('--optuna-prune-above', help="UPPER:V1,V2,...: the run is an Optuna trial "
                        "(launch_optuna_trial; the chief's in an in-memory study with ThresholdPruner("
                        "upper=UPPER)) on the score V<epoch>; each worker writes what it returned to "
                        "OUT/trial<k>.txt")
    parser.add_argument('--chief-cut-saving', type=int,
                        help="the chief saves global step N's checkpoint once its link is cut (see "
                             "ChiefCutWhileSaving)")
    parser.add_argument('--chief-dies-saving', type=int,
                        help='the chief is SIGKILLed (once) while it writes the checkpoint of this step')
    parser.add_argument('--chief-loses-data', type=int,
                        help="once, after this epoch-end step's checkpoint and record, the chief cuts its "
                             "data file to half and is SIGKILLed")
    parser.add_argument('--mixed-precision', choices=['bf16', 'fp16'], help='TrainConfig(mixed_precision=)')
    parser.add_argument('--overflow-step', type=int,
                        help="worker 1's first datapoint of this step (1-based, in every epoch) gets "
                             "y = OVERFLOW_Y: with 'fp16' its scaled gradients overflow float16")
    parser.add_argument('--hold-after-server', action='store_true',
                        help="after its server started, wait (up to --startup-timeout s) until the file "
                             "'go' exists in --out")
    parser.add_argument('--startup-timeout', type=float, default=120)
    add_model_arguments(parser, 'worker')
    add_rollback_arguments(parser, 'worker')
    parser.add_argument('--finish-timeout', type=float, help="the trainer's FINISH_TIMEOUT")
    parser.add_argument('--exit-after-loss-timeout', type=float, help="the trainer's EXIT_AFTER_LOSS_TIMEOUT")
    parser.add_argument('--after-failure-timeout', type=float, help="the trainer's AFTER_FAILURE_TIMEOUT")
    parser.add_argument('--abort-timeout', type=float, help="the trainer's ABORT_TIMEOUT")
    return parser.parse_args(argv)


def elastic_policy(text):
    """The ElasticPolicy that ``--elastic`` names (None without it)."""
    if text is None:
        return None
    kind, _, number = text.partition(':')
    if kind == 'none':
        return NoAdjustment()
    return {'keep': KeepGlobalBatch, 'scale': ScaleLearningRate}[kind](int(number))


def make_trainer(args, server):
    from tensorpack_lite.train.distributed import (CollectiveAllReduceTrainer,
                                                   DistributedTrainerParameterServer,
                                                   DistributedTrainerReplicated)
    towers = ['/cpu:{}'.format(i) for i in range(args.towers)]
    if args.trainer == 'collective':
        trainer = CollectiveAllReduceTrainer(towers, server, average=not args.sum,
                                             compression=args.compression, exchange=args.exchange)
    elif args.trainer == 'ps':
        trainer = DistributedTrainerParameterServer(towers, server)
    else:
        trainer = DistributedTrainerReplicated(towers, server)
    trainer.STARTUP_TIMEOUT = args.startup_timeout
    if args.finish_timeout is not None:
        trainer.FINISH_TIMEOUT = args.finish_timeout
    if args.exit_after_loss_timeout is not None:
        trainer.EXIT_AFTER_LOSS_TIMEOUT = args.exit_after_loss_timeout
    if args.after_failure_timeout is not None:
        trainer.AFTER_FAILURE_TIMEOUT = args.after_failure_timeout
    if args.abort_timeout is not None:
        trainer.ABORT_TIMEOUT = args.abort_timeout
    if args.no_epoch_broadcast:
        trainer.BROADCAST_EVERY_EPOCH = False
    return trainer


def wait_for_file(path, timeout):
    print('holding until {} exists'.format(path), flush=True)
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError('{} did not appear within {} s'.format(path, timeout))
        time.sleep(0.05)


def run_optuna_trial(upper, config, trainer, out):
    """``config`` as an Optuna trial (the chief asks an in-memory study for it, the others pass
    None); writes what launch_optuna_trial returned, or that it raised TrialPruned."""
    import optuna
    from tensorpack_lite.train import launch_optuna_trial
    trial = None
    if trainer.is_chief:
        trial = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=upper)).ask()
    try:
        result = repr(launch_optuna_trial(trial, config, trainer, 'score'))
    except optuna.TrialPruned as err:
        result = 'TrialPruned: {}'.format(err)
    with open(os.path.join(out, 'trial{}.txt'.format(trainer.task_index)), 'w') as f:
        f.write(result)


def main(argv):
    from tensorpack_lite.multiprocess.server import create_server
    from tensorpack_lite.train.horovod_trainer import RankShardData
    args = parse_args(argv)
    if args.tf1:
        tfv1.disable_v2_behavior()
    server = create_server(config=tfv1.ConfigProto(device_count={'CPU': args.towers}))
    if args.hold_after_server:
        wait_for_file(os.path.join(args.out, 'go'), args.startup_timeout)
    trainer = make_trainer(args, server)     # a ps task serves here, then exits
    logdir = args.logdir
    if logdir and args.per_worker_logdir:
        logdir = os.path.join(logdir, 'worker{}'.format(trainer.task_index))
    if logdir and (trainer.is_chief or args.per_worker_logdir or args.shared_logdir):
        logger.set_logger_dir(logdir, action='k')
    policy = elastic_policy(args.elastic)
    if isinstance(policy, KeepGlobalBatch):
        args.batch = policy.per_replica_batch(trainer)
    num = args.samples or args.steps_per_epoch * args.towers * args.batch * trainer.num_worker
    samples = make_samples(num) if args.model == 'tiny' else sequence_samples(num)
    if args.overflow_step:
        step_size = args.towers * args.batch * trainer.num_worker
        samples[(args.overflow_step - 1) * step_size + 1][1] = np.float32(OVERFLOW_Y)   # worker 1's
    samples = poison_shard(samples, args, trainer.num_worker, args.towers * args.batch * trainer.num_worker)
    if args.shuffle:
        fix_rng_seed(7)
    df = RankShardData(DataFromList(samples, shuffle=args.shuffle), trainer.task_index, trainer.num_worker)
    if args.data:
        df = ShardedData(args.data.partition('shards:')[2], **SHARD_OPTIONS)   # the share: the trainer's
    held = os.path.join(args.out, 'worker1-held') if args.worker1_holds else None
    costs = EveryWorkerCost() if args.model == 'rnn' else None
    callbacks = [DumpWeights(os.path.join(args.out, 'worker{}.json'.format(trainer.task_index)), held, costs)]
    if costs is not None:
        callbacks.insert(0, costs)
    if args.data:
        ids = os.path.join(args.out, 'ids-worker{}.jsonl'.format(trainer.task_index))
        callbacks.insert(0, RecordIds(ids))
    if args.stop_at_step and trainer.is_chief:
        callbacks.append(StopAtStep(args.stop_at_step))
    callbacks[:0] = rollback_callbacks(args, trainer, args.out, trainer.task_index)
    if held and trainer.task_index == 1:
        release = os.path.join(args.out, 'release-worker1')
        callbacks.append(HoldAfterLastStep(args.worker1_holds, held, release))
    marker = os.path.join(args.out, 'chief-died')
    if args.pause_at_step:
        callbacks.append(PauseAtStep(args.pause_at_step, args.out))
    callbacks += [HoldAtStep(step, args.out) for step in args.hold_at_step]
    if logger.get_logger_dir() and args.chief_cut_saving and trainer.is_chief:
        callbacks.append(ChiefCutWhileSaving(args.chief_cut_saving, args.out))
    elif logger.get_logger_dir() and args.chief_dies_saving and trainer.is_chief:
        callbacks.append(ChiefDiesSaving(args.chief_dies_saving, marker))
    elif logger.get_logger_dir():
        # ChiefLosesData damages the checkpoint of the step before: written when its trigger returns
        saver = ModelSaver(background=not args.chief_loses_data)
        callbacks.append(PeriodicTrigger(saver, every_k_steps=args.save_every_steps) if args.save_every_steps
                         else saver)
    if args.early_stop and trainer.is_chief:
        patience, _, values = args.early_stop.partition(':')
        callbacks[:0] = [ScriptedScore([float(v) for v in values.split(',')]),   # before ModelSaver
                         EarlyStopping('score', patience=int(patience))]
    if args.optuna_prune_above and trainer.is_chief:
        scores = args.optuna_prune_above.partition(':')[2].split(',')
        callbacks.insert(0, ScriptedScore([float(v) for v in scores]))
    if args.weight_average is not None:
        callbacks.insert(0, WeightAverage(args.weight_average, every_k_steps=2))
    if args.chief_loses_data and trainer.is_chief:
        callbacks.append(ChiefLosesData(args.chief_loses_data, marker))
    if args.die_at_step and trainer.task_index == args.die_task:
        marker = os.path.join(args.out, 'died-once') if args.die_once else None
        callbacks.append(DieAtStep(args.die_at_step, marker))
    if args.break_session_at_step and trainer.task_index == 1:
        callbacks.insert(0, BreakSessionAt(args.break_session_at_step))
        trainer.SESSION_PROBE_TIMEOUT = 1.0    # the broken session never answers
        trainer.EXIT_TIMEOUT = 2.0             # the exit once DumpWeights was abandoned
    batch_norm = None if args.batch_norm is None else args.batch_norm.replace('none', '')
    if args.model == 'rnn':
        model = WhileLoopRNN(seed=INIT_SEED + trainer.task_index, lr=args.lr)
    else:
        model = (TinyModelWithIds if args.data else TinyModel)(
            INIT_SEED + trainer.task_index, args.lr, args.hidden, args.optimizer, batch_norm,
            lr_variable=isinstance(policy, ScaleLearningRate))
    config = AutoResumeTrainConfig(model=model,
                                   dataflow=BatchData(df, args.batch), callbacks=callbacks,
                                   steps_per_epoch=args.steps_per_epoch, max_epoch=args.epochs,
                                   mixed_precision=args.mixed_precision, elastic=policy,
                                   accumulate=args.accumulate)
    if args.optuna_prune_above:
        run_optuna_trial(float(args.optuna_prune_above.partition(':')[0]), config, trainer, args.out)
    else:
        launch_train_with_config(config, trainer)
    if held:     # whether worker 1 was done holding when this worker's training ended
        with open(os.path.join(args.out, 'worker{}.ended'.format(trainer.task_index)), 'w') as f:
            f.write(str(os.path.exists(held)))


if __name__ == '__main__':
    main(sys.argv[1:])
