"""Training that recovers from a bad step: :class:`RollbackOnAnomaly` puts the model back to an
in-memory snapshot when the loss turns NaN or infinite (or spikes, by a :class:`SpikeRule`) and
goes on past the data that led to it."""

import bisect
import json
import math
import os
import re

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..tfutils.varmanip import SessionUpdate
from ..utils import logger
from ..utils.argtools import is_int, is_real
from ..utils.fs import write_atomically

__all__ = ['SpikeRule', 'RollbackOnAnomaly']

_REPLICA = re.compile(r'^tower[0-9]+/')
_SIGMA_PER_QUARTILE = 1.4826    # normal noise: (upper quartile - median) * this = its standard deviation


class SpikeRule:
    """What counts as a spike of the loss: a value above ``median + k * 1.4826 * (upper -
    median)`` of the last ``window`` good values, ``upper`` the median of their upper half (the
    upper quartile; for normal noise, 1.4826 times its distance to the median is the standard
    deviation), once ``warmup`` values were seen. One-sided and robust: a loss is bounded below
    and skewed up (most batches near the median, a few harder ones well above), which the upper
    half measures and a symmetric spread would not; one outlier in the window moves the median and
    the quartile by one rank at most. ``min_spread`` (relative to the median) keeps a nearly
    constant loss from calling every small rise a spike.

    Args:
        k (float): how many (robust) standard deviations above the median is a spike.
        window (int): how many of the latest good values the statistics are taken over.
        warmup (int): how many values are needed before anything is a spike (<= window).
        min_spread (float): the spread used is at least ``min_spread * |median|``.

    Example::

        rule = SpikeRule(k=10, window=200, warmup=50)
        if not rule.is_spike(loss):
            rule.observe(step, loss)
    """

    def __init__(self, k=10.0, window=200, warmup=50, min_spread=0.01):
        if not is_real(k) or not k > 0:
            raise ValueError("SpikeRule: k must be a number > 0, got {!r}".format(k))
        if not is_int(window) or window < 2:
            raise ValueError("SpikeRule: window must be an int >= 2, got {!r}".format(window))
        if not is_int(warmup) or not 2 <= warmup <= window:
            raise ValueError("SpikeRule: warmup must be an int in [2, window={}], got {!r}".format(
                window, warmup))
        if not is_real(min_spread) or not min_spread >= 0:
            raise ValueError("SpikeRule: min_spread must be a number >= 0, got {!r}".format(min_spread))
        self.k, self.window, self.warmup = float(k), int(window), int(warmup)
        self.min_spread = float(min_spread)
        self._history = []     # [(global_step, value)] of the latest good values, oldest first
        self._sorted = []      # their values, sorted: the median and the quartile in O(1)

    def __repr__(self):
        return "SpikeRule(k={:g}, window={}, warmup={})".format(self.k, self.window, self.warmup)

    @property
    def history(self):
        """``[(global_step, value)]`` of the latest good values (at most ``window``), oldest first."""
        return list(self._history)

    @history.setter
    def history(self, points):
        self._history = [(int(s), float(v)) for s, v in points][-self.window:]
        self._sorted = sorted(v for _, v in self._history)

    def limit(self):
        """The largest value that is not a spike; None during the warm-up."""
        if len(self._history) < self.warmup:
            return None
        ordered = self._sorted
        median = _middle(ordered)
        upper = _middle(ordered, len(ordered) // 2)       # the median of the upper half
        return median + self.k * max(_SIGMA_PER_QUARTILE * (upper - median), self.min_spread * abs(median))

    def is_spike(self, value):
        """Whether ``value`` (finite) is above :meth:`limit`."""
        limit = self.limit()
        return limit is not None and value > limit

    def observe(self, step, value):
        """Add the good value of global step ``step`` to the window."""
        value = float(value)
        self._history.append((int(step), value))
        bisect.insort(self._sorted, value)
        if len(self._history) > self.window:
            _, oldest = self._history.pop(0)
            del self._sorted[bisect.bisect_left(self._sorted, oldest)]

    def forget_after(self, step):
        """Drop the values of the global steps after ``step`` (their updates were undone)."""
        self.history = [(s, v) for s, v in self._history if s <= step]


def _mean(tensors):
    return tensors[0] if len(tensors) == 1 else tf.add_n(tensors) / float(len(tensors))


def _middle(ordered, start=0):
    """The median of the sorted list ``ordered[start:]`` (the mean of the two middle values for an
    even length), without copying it."""
    n = len(ordered) - start
    return (ordered[start + (n - 1) // 2] + ordered[start + n // 2]) / 2.0


class RollbackOnAnomaly(Callback):
    """Puts the model back to its latest good state when a step goes wrong, and goes on with the
    data after that step.

    Every ``snapshot_every`` steps (global steps that are multiples of it, and the step training
    starts from) it copies the model's state into memory: every global variable but the global
    step (the weights, the optimizer's slots and counters, moving averages), and the replicas of a
    multi-tower trainer (``tower<k>/``). After each step it reads the loss (the mean over the
    training towers' ``loss``), and after a step whose loss is NaN or infinite, or a spike by
    ``spikes`` (a :class:`SpikeRule`; with ``check_weights``, also weights that are not finite: a
    ReLU can turn a NaN into a finite loss; with ``watch_gradient_norm``, also a gradient norm
    that is not finite or a spike), it puts the snapshot back. The global step and the
    data stream go on: the steps since the snapshot (the *window*, ``[snapshot step + 1, bad
    step]``) count as done and their data is never trained on; the run ends as a run whose data
    lacks the window, with as many more steps as the window has. A checkpoint of the bad step
    holds the restored state.

    Each rollback is a log line naming the steps, the scalar ``rollbacks`` (the count so far) in
    the monitors, and a record in :attr:`windows` and ``rollbacks.json`` in the logger directory.
    The records are saved with every checkpoint, and ``rollbacks.json`` is written at once: a
    run killed after a rollback and resumed from an older checkpoint replays the window's steps
    and puts the snapshot back at its end again, whatever the loss says, so it goes on as the
    first run did.

    More than ``max_rollbacks`` rollbacks within ``rollback_period`` steps raise a RuntimeError
    naming their steps (the data or the model is broken beyond a bad batch). With ``lr_scale``,
    the variable ``lr_name`` is multiplied by it for the ``lr_steps`` steps after a rollback,
    then set back (it is then not part of the snapshots).

    The trainer must let a non-finite cost through (``trainer.CHECK_COST = False`` before it
    builds its graph). In several processes (``CollectiveAllReduceTrainer``, ``HorovodTrainer``,
    the parameter-server trainers) every process reads the step's mean cost (and gradient norm)
    over every tower of every process from the vote that travels with the gradients (the
    all-reduce; with parameter servers, to the chief and back in its token), so all roll back
    after the same step, each to its own snapshot; the chief marks a replayed window's steps in
    that vote for all. With parameter servers the chief alone snapshots and restores the
    variables they hold, and the other workers wait for it before their next step. With
    ``accumulate=K``, an anomaly inside an update is rolled back at its end (whole updates); in
    several processes only an update's last step reduces, carrying the mean over the update, so
    ``snapshot_every`` must be a multiple of K. A step the fp16 loss scaling skipped is neither a
    spike nor an anomaly.

    Args:
        loss (str): the name of the loss tensor in the towers (or the graph).
        snapshot_every (int): steps between two snapshots.
        spikes: True (a default :class:`SpikeRule`), a :class:`SpikeRule`, or False (NaN and
            infinities only).
        check_weights (bool): also roll back when a variable is not finite after a step (one more
            ``session.run`` per step).
        max_rollbacks (int), rollback_period (int): the bound.
        lr_scale (float): multiply the learning rate by it after a rollback (None: leave it).
        lr_steps (int): for how many steps.
        lr_name (str): the learning-rate variable.
        watch_gradient_norm (bool): also watch the gradient norm of each step (of each update,
            with accumulation): the mean over the training towers of the global norm of each
            tower's gradients, before they are averaged; its spikes by a :class:`SpikeRule` of
            ``spikes`` ' parameters (:attr:`gradient_spikes`).

    Example::

        trainer = SimpleTrainer()
        trainer.CHECK_COST = False
        callbacks=[RollbackOnAnomaly('cost', snapshot_every=100, lr_scale=0.5, lr_steps=500), ModelSaver()]
    """

    _chief_only = False    # every process would have to roll back

    def __init__(self, loss='cost', snapshot_every=100, spikes=True, max_rollbacks=5, rollback_period=1000,
                 check_weights=False, lr_scale=None, lr_steps=100, lr_name='learning_rate',
                 watch_gradient_norm=False):
        if not isinstance(loss, str) or not loss:
            raise TypeError("RollbackOnAnomaly: loss must be a tensor name (str), got {!r}".format(loss))
        for name, value in (('snapshot_every', snapshot_every), ('max_rollbacks', max_rollbacks),
                            ('rollback_period', rollback_period), ('lr_steps', lr_steps)):
            if not is_int(value) or value < 1:
                raise ValueError("RollbackOnAnomaly: {} must be a positive int, got {!r}".format(name, value))
        if spikes is True:
            spikes = SpikeRule()
        elif spikes is False or spikes is None:
            spikes = None
        elif not isinstance(spikes, SpikeRule):
            raise TypeError("RollbackOnAnomaly: spikes must be True, False or a SpikeRule, got {!r}".format(
                spikes))
        if lr_scale is not None and not (is_real(lr_scale) and 0 < lr_scale and math.isfinite(lr_scale)):
            raise ValueError("RollbackOnAnomaly: lr_scale must be a number > 0 or None, got {!r}".format(
                lr_scale))
        if not isinstance(lr_name, str) or not lr_name:
            raise TypeError("RollbackOnAnomaly: lr_name must be a variable name (str), got {!r}".format(
                lr_name))
        self.loss_name = loss
        self.snapshot_every = int(snapshot_every)
        self.spikes = spikes
        self.max_rollbacks, self.rollback_period = int(max_rollbacks), int(rollback_period)
        self.check_weights = bool(check_weights)
        self.watch_gradient_norm = bool(watch_gradient_norm)
        self.gradient_spikes = None if spikes is None or not watch_gradient_norm else \
            SpikeRule(spikes.k, spikes.window, spikes.warmup, spikes.min_spread)
        """The :class:`SpikeRule` of the gradient norm (``spikes`` ' parameters, a window of its own)."""
        self.lr_scale = None if lr_scale is None else float(lr_scale)
        self.lr_steps, self.lr_name = int(lr_steps), lr_name
        self.windows = []
        """The rollbacks so far, oldest first: dicts with the global steps ``snapshot`` (restored),
        ``first`` and ``last`` (the window whose updates were undone), the ``reason`` and the loss
        ``value``."""
        self._replays = []         # windows recorded after the checkpoint this run resumed from
        self._resumed = False
        self._lr = None            # {'restore': value, 'until': global step} while the rate is scaled
        self._snapshot = None      # (global step, values)
        self._vote = None          # with several processes: the vote that carries the step's mean cost
        self._skipped = None       # the loss scale's skipped steps after the last step (fp16)
        self._step_skipped = False
        self._accumulator = None
        self._updates = True       # whether the run of the step updates the model (accumulation)
        self._pending = None       # (reason, value) of an anomaly inside an update, rolled back at its end
        self._base = None          # the global step the model's state continues from
        self._loss_value = None
        self._norm_value = None

    def __str__(self):
        return "RollbackOnAnomaly('{}')".format(self.loss_name)

    # ----- graph ---------------------------------------------------------------------------------

    def _setup_graph(self):
        trainer = self.trainer
        self._vote = self._check_trainer(trainer)
        scale = getattr(trainer, 'loss_scale', None)
        self._skipped_var = None if scale is None else scale.skipped_steps
        self._accumulator = getattr(trainer, 'accumulator', None)
        fetches = [] if self._vote is not None else [self._mean_loss()]
        # with accumulation, the runs before an update's last fetch nothing that runs the update
        self._fetch_between = tfv1.train.SessionRunArgs(fetches=list(fetches))    # built once
        if self.watch_gradient_norm and self._vote is None:     # (else the vote's)
            fetches.append(self._mean_gradient_norm(trainer))
        if self._skipped_var is not None:
            with tf.control_dependencies([trainer.train_op]):     # read after the step's update
                fetches.append(tf.identity(self._skipped_var.read_value(), name='skipped_after_step'))
        self._fetch = tfv1.train.SessionRunArgs(fetches=fetches)
        lr = [v for v in tfv1.global_variables() if v.op.name == self.lr_name]
        if self.lr_scale is not None and not lr:
            raise ValueError("{}: lr_scale is set, but the graph has no variable '{}' (lr_name)".format(
                self, self.lr_name))
        self._lr_var = lr[0] if self.lr_scale is not None else None
        step = tfv1.train.get_global_step()
        self._variables = [v for v in tfv1.global_variables()
                           if v is not step and v is not self._lr_var] + \
            [v for v in tfv1.local_variables() if _REPLICA.match(v.op.name)] + \
            (list(self._accumulator.variables) if self._accumulator is not None else [])
        self._keep_to_chief(trainer)
        self._finite = None
        if self.check_weights:
            floats = [v for v in self._variables if v.dtype.base_dtype.is_floating]
            self._finite = tf.reduce_all(tf.stack([tf.reduce_all(tf.math.is_finite(v)) for v in floats]),
                                         name='weights_finite')

    def _keep_to_chief(self, trainer):
        """On a parameter-server trainer, the variables the parameter servers hold are one copy
        for every worker: the chief alone snapshots and restores them (the others meet it after,
        :meth:`_roll_back`); each worker its own variables (e.g. its replicas)."""
        shared = getattr(trainer, 'shared_variables', None)
        mine = self._variables + ([self._lr_var] if self._lr_var is not None else [])
        self._shared = shared(mine) if shared is not None else []
        if self._shared and not trainer.is_chief:
            names = {v.name for v in self._shared}
            self._variables = [v for v in self._variables if v.name not in names]
            if self._lr_var is not None and self._lr_var.name in names:
                self._lr_var = None

    def _check_trainer(self, trainer):
        """Raise when this callback cannot roll ``trainer`` back; return the vote that carries the
        step's mean cost when it trains in several processes (else None)."""
        name = type(trainer).__name__
        if getattr(trainer, 'checks_cost', False):
            raise ValueError("{}: {}.CHECK_COST is True: the trainer stops with a FloatingPointError at a "
                             "non-finite cost before this callback can roll back; set trainer.CHECK_COST = "
                             "False before the trainer builds its graph.".format(self, name))
        towers = len(getattr(trainer, 'devices', None) or ()) or 1
        if getattr(trainer, 'world_size', 1) <= towers:
            return None
        accumulate = getattr(trainer, 'accumulate', 1)
        if self.snapshot_every % accumulate:
            raise ValueError("{}: with accumulate={} in {} processes, only an update's last step is judged "
                             "(its all-reduce carries the update's mean cost): snapshot_every={} must be a "
                             "multiple of {} so that the snapshots lie between updates.".format(
                                 self, accumulate, trainer.world_size // towers, self.snapshot_every,
                                 accumulate))
        vote = getattr(getattr(trainer, 'protocol', None), 'cost_vote', None)
        carried = getattr(vote, 'costs_carried', None)
        processes = trainer.world_size // towers
        if not carried and getattr(trainer, 'CHECK_COST', False):
            raise ValueError("{}: {} trains in {} processes with CHECK_COST = True: its steps carry "
                             "the costs only when it lets a non-finite cost through; set trainer.CHECK_COST "
                             "= False before the trainer builds its graph.".format(self, name, processes))
        if not carried:
            raise NotImplementedError(
                "{}: {} trains in {} processes whose steps carry no cost (XLA_COMPILE): the processes "
                "could not take the decision together.".format(self, name, processes))
        if self.watch_gradient_norm and not vote.gradient_norms_carried:
            raise ValueError("{}: watch_gradient_norm with {} processes: {}'s reduction carries no gradient "
                             "norm.".format(self, processes, name))
        if self.check_weights:
            raise NotImplementedError("{}: check_weights with {} processes: each would check its own "
                                      "weights, not one decision for all.".format(self, processes))
        watched = {t.name for t in self._loss_tensors()}
        # with accumulation, the vote carries the costs' means over the update
        means = {mean.name: cost.name for cost, mean in getattr(getattr(trainer, 'accumulator', None),
                                                                'costs', ())}
        carried = [means.get(t.name, t.name) for t in carried]
        if not watched <= set(carried):
            raise ValueError("{}: with {} processes the loss watched must be the cost the trainer minimizes "
                             "({}), whose mean every process reads from the step's all-reduce; '{}' is "
                             "{}.".format(self, processes, ', '.join(carried), self.loss_name,
                                          ', '.join(sorted(watched))))
        return vote

    def _mean_gradient_norm(self, trainer):
        norms = getattr(trainer, 'tower_gradient_norms', lambda: [])()
        if not norms:
            raise ValueError("{}: watch_gradient_norm, but {} has no towers' gradients to watch "
                             "(tower_gradient_norms()).".format(self, type(trainer).__name__))
        return _mean(norms)

    def _mean_loss(self):
        return _mean([tf.cast(loss, tf.float32) for loss in self._loss_tensors()])

    def _loss_tensors(self):
        """The training towers' tensors ``loss_name`` (or the graph's)."""
        try:
            towers = self.trainer.towers.training()
        except (AttributeError, RuntimeError):     # a trainer without towers
            towers = []
        losses = []
        if towers:
            for handle in towers:
                try:
                    losses.append(handle[self.loss_name])
                except KeyError:
                    pass
        return losses or self.get_tensors_maybe_in_tower([self.loss_name])

    # ----- training ------------------------------------------------------------------------------

    def _before_train(self):
        lr = [self._lr_var] if self._lr_var is not None else []
        self._update = SessionUpdate(self.trainer.sess, self._variables + lr)
        start = self.global_step
        self._base = start
        self._take_snapshot(start)
        self._read_skipped()
        if self._resumed and self.trainer.is_chief:
            self._schedule_replays(start)
        self._mark_next_step(start)

    def _mark_next_step(self, step):
        """With several processes, on the chief: mark the step after ``step`` for every process
        when a replay snapshots or rolls back after it (the others do not know the replays)."""
        if self._vote is None:
            return
        for name, key in (('snapshot', 'snapshot'), ('rollback', 'last')):
            if any(r[key] == step + 1 for r in self._replays):
                self._vote.mark(self.trainer.sess, name)

    def _before_run(self, ctx):
        self._updates = self._accumulator is None or self._accumulator.updates_at(self.global_step)
        return self._fetch if self._updates else self._fetch_between

    def _after_run(self, run_context, run_values):
        results = list(run_values.results)
        skipped = int(results.pop()) if self._skipped_var is not None and self._updates else self._skipped
        self._step_skipped = skipped is not None and self._skipped is not None and skipped > self._skipped
        self._skipped = skipped
        # with several processes, the step's mean cost is the vote's, read once every hook ran (with
        # accumulation, it reduces in an update's last run only: the update's mean cost)
        if self._vote is None:
            self._loss_value = float(results[0])
            self._norm_value = float(results[1]) if len(results) > 1 else None
        else:
            self._loss_value = True if self._updates else None

    def _trigger_step(self):
        step = self.global_step
        if self._loss_value is not None:   # (None: no run of the step fetched it, or the vote did not reduce)
            self._judge(step)
        self._mark_next_step(step)

    def _judge(self, step):
        """After a step whose loss was read: roll back, or go on (a snapshot when one is due)."""
        value, self._loss_value = self._loss_value, None
        value, norm, replayed, snapshot = self._step_outcome(step, value)
        # a step the loss scaling skipped (gradients not finite) applied no update: nothing to undo
        reason = None if self._step_skipped else self._anomaly(value, norm)
        reason = reason or replayed
        if self._pending is not None:        # an anomaly earlier in this update
            reason, value = self._pending
        if reason is not None and (step - self._snapshot[0]) % self._steps_per_update:
            self._pending = (reason, value)  # roll back at the update's end: whole updates are undone
        elif reason is not None:
            self._pending = None
            self._roll_back(step, value, reason)
        else:
            self._go_on(step, value, norm, snapshot)

    def _step_outcome(self, step, value):
        """``(loss, gradient norm, replayed, snapshot)`` of the step: its loss and gradient norm
        (None when not watched, or not read in this step; with several processes the vote's
        means), why it is rolled back as a replay of a recorded window (else None) and whether a
        replay snapshots after it."""
        replay = self._replays[0] if self._replays and self._replays[0]['last'] == step else None
        if replay is not None:
            self._replays.pop(0)
        if self._vote is None:
            replayed = 'replayed: {}'.format(replay['reason']) if replay else None
            norm, self._norm_value = self._norm_value, None
            return value, norm, replayed, any(r['snapshot'] == step for r in self._replays)
        marks = self._vote.marks
        replayed = 'replayed: {}'.format(replay['reason']) if replay else \
            'replayed (marked by {})'.format(self.trainer.protocol.CHIEF)
        norm = self._vote.step_gradient_norm if self.watch_gradient_norm else None
        return self._vote.step_cost, norm, replayed if 'rollback' in marks else None, 'snapshot' in marks

    def _go_on(self, step, value, norm, snapshot):
        """After a good step: into the spike windows; a snapshot when due; the rate back after
        its scaling."""
        if self.spikes is not None and not self._step_skipped:
            self.spikes.observe(step, value)
        if self.gradient_spikes is not None and norm is not None and not self._step_skipped:
            self.gradient_spikes.observe(step, norm)
        if step % self.snapshot_every == 0 or snapshot:
            self._take_snapshot(step)
            self._base = step
        self._end_lr_scaling(step)

    def _anomaly(self, value, norm):
        if not math.isfinite(value):
            return 'loss {}'.format(value)
        if norm is not None and not math.isfinite(norm):
            return 'gradient norm {}'.format(norm)
        for name, rule, watched in (('loss', self.spikes, value),
                                    ('gradient norm', self.gradient_spikes, norm)):
            if rule is not None and watched is not None and rule.is_spike(watched):
                return '{} spike: {:.6g} > {:.6g} ({!r})'.format(name, watched, rule.limit(), rule)
        if self._finite is not None and not self.trainer.sess.run(self._finite):
            return 'weights not finite'
        return None

    @property
    def _steps_per_update(self):
        """The steps after a snapshot a rollback undoes a multiple of (whole updates): 1 when
        the vote judges each update at its end."""
        return 1 if self._accumulator is None or self._vote is not None else \
            self._accumulator.num_micro_batches

    def _take_snapshot(self, step):
        self._snapshot = (step, self.trainer.sess.run(self._variables))

    def _read_skipped(self):
        """The loss scale's count of skipped steps now (at the start, and after a rollback put it back)."""
        if self._skipped_var is not None:
            self._skipped = int(self.trainer.sess.run(self._skipped_var))

    def _roll_back(self, step, value, reason):
        snapshot_step, values = self._snapshot
        record = {'snapshot': snapshot_step, 'first': self._base + 1, 'last': step, 'reason': reason,
                  'value': value if math.isfinite(value) else str(value)}
        recent = [w['last'] for w in self.windows if w['last'] > step - self.rollback_period] + [step]
        if len(recent) > self.max_rollbacks:
            raise RuntimeError("{}: {} rollbacks within {} steps (max_rollbacks={}), at global steps {} "
                               "({}); the data or the model is broken beyond a bad batch.".format(
                                   self, len(recent), self.rollback_period, self.max_rollbacks,
                                   ', '.join(map(str, recent)), reason))
        self._update.update({v.name: value for v, value in zip(self._variables, values)})
        if self._shared:
            self.trainer.meet_chief()       # the others go on once the chief restored the shared ones
        self._read_skipped()
        self.windows.append(record)
        self._base = step
        for rule in (self.spikes, self.gradient_spikes):
            if rule is not None:
                rule.forget_after(record['first'] - 1)
        self._start_lr_scaling(step)
        self._write_records()
        logger.warn("{}: {} at global step {}: restored the snapshot of step {}; the updates of steps "
                    "{}-{} are undone and their data is skipped (rollback {}).".format(
                        self, reason, step, snapshot_step, record['first'], step, len(self.windows)))
        self.trainer.monitors.put_scalar('rollbacks', len(self.windows))

    def _start_lr_scaling(self, step):
        if self._lr_var is None:      # (the chief's, when the parameter servers hold it)
            return
        sess = self.trainer.sess
        restore = self._lr['restore'] if self._lr else float(sess.run(self._lr_var))
        self._update.update({self._lr_var.name: restore * self.lr_scale})
        self._lr = {'restore': restore, 'until': step + self.lr_steps}
        logger.info("{}: {} = {:.6g} until global step {}.".format(
            self, self.lr_name, restore * self.lr_scale, self._lr['until']))

    def _end_lr_scaling(self, step):
        if self._lr is None or self._lr_var is None or step < self._lr['until']:
            return
        self._update.update({self._lr_var.name: self._lr['restore']})
        logger.info("{}: {} back to {:.6g}.".format(self, self.lr_name, self._lr['restore']))
        self._lr = None

    # ----- records and resume --------------------------------------------------------------------

    def _records_path(self):
        logdir = logger.get_logger_dir()
        return None if logdir is None else os.path.join(logdir, 'rollbacks.json')

    def _write_records(self):
        path = self._records_path()
        if path is None or not self.trainer.is_chief:
            return
        text = json.dumps(self.windows + self._replays, indent=1).encode('utf-8')
        write_atomically(path, lambda f: f.write(text))

    def _schedule_replays(self, start):
        """The windows ``rollbacks.json`` holds after the checkpoint this run resumed from."""
        path = self._records_path()
        if path is None or not os.path.isfile(path):
            return
        with open(path) as f:
            recorded = json.load(f)
        self._replays = sorted((w for w in recorded if w['last'] > start), key=lambda w: w['last'])
        for window in self._replays:
            if window['snapshot'] < start:
                logger.warn("{}: the window {}-{} began before global step {}, where this run resumed: "
                            "its replay undoes the steps from {} only.".format(
                                self, window['first'], window['last'], start, start + 1))
                window['snapshot'] = start
        if self._replays:
            logger.info("{}: will replay and undo the recorded window(s) {} again.".format(
                self, ', '.join('{}-{}'.format(w['first'], w['last']) for w in self._replays)))

    def _get_state(self):
        return {'windows': [dict(w) for w in self.windows],     # copies: a checkpoint may be written later
                'spike_history': [list(p) for p in self.spikes.history] if self.spikes is not None else [],
                'gradient_norm_history': [list(p) for p in self.gradient_spikes.history]
                if self.gradient_spikes is not None else [],
                'lr': dict(self._lr) if self._lr is not None else None}

    def _set_state(self, state):
        self._resumed = True
        self.windows = [dict(w) for w in state['windows']]
        if self.spikes is not None:
            self.spikes.history = [(int(s), float(v)) for s, v in state['spike_history']]
        if self.gradient_spikes is not None:
            self.gradient_spikes.history = [(int(s), float(v))
                                            for s, v in state.get('gradient_norm_history', [])]
        self._lr = state['lr']

    def _stat_names(self):
        return ['rollbacks']
