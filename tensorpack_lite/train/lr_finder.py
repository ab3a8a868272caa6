"""The learning-rate range test: :func:`find_learning_rate` trains a copy of a model for a few
steps while the rate grows exponentially, records the loss at each rate and suggests one
(:class:`LRFinderResult`), leaving the real run's graph, logger and directories alone."""

import copy
import csv
import io
import json
import math
import os

import numpy as np

from ..compat import tfv1
from ..callbacks.hyperparam import GraphVarParam
from ..dataflow.base import DataFlow
from ..input_source.feed import FeedInput
from ..loop.callback import Callback
from ..tfutils.sessinit import JustCurrentSession, SessionInit
from ..utils import logger
from ..utils.argtools import is_int, is_real
from ..utils.develop import import_optional
from ..utils.fs import write_atomically
from .config import TrainConfig
from .trainers import SimpleTrainer

__all__ = ['LRFinderResult', 'find_learning_rate']

_METHODS = ('steepest', 'minimum')


class LRFinderResult:
    """The curve of a learning-rate range test and the rate it suggests.

    Attributes:
        lrs (list[float]): the learning rate of each step, growing exponentially.
        raw_losses (list[float]): the loss of each step (NaN or infinite at a step that diverged).
        losses (list[float]): the smoothed loss of each step (an exponential moving average,
            bias-corrected): what the suggestion and the picture use.
        suggestion (float): the suggested learning rate (see :func:`find_learning_rate`), or None
            when the loss never went down.
        method (str): how it was found: 'steepest' or 'minimum' (minimum / 10).
        stop_reason (str): why the sweep ended before ``num_steps`` steps, or None.

    ``skip_start``: how many first points the 'steepest' rule passes over (where the moving
    average has not settled: one value of noise there can look like the steepest fall).
    """

    def __init__(self, lrs, raw_losses, losses, method='steepest', stop_reason=None, skip_start=0):
        if method not in _METHODS:
            raise ValueError("LRFinderResult: method must be one of {}, got {!r}".format(_METHODS, method))
        self.skip_start = int(skip_start)
        self.lrs = [float(x) for x in lrs]
        self.raw_losses = [float(x) for x in raw_losses]
        self.losses = [float(x) for x in losses]
        self.stop_reason = stop_reason
        self.method, self.suggestion = self._suggest(method)

    def __repr__(self):
        return "LRFinderResult({} steps, lr {:.3g}..{:.3g}, suggestion={})".format(
            len(self.lrs), self.lrs[0], self.lrs[-1],
            'None' if self.suggestion is None else '{:.3g} ({})'.format(self.suggestion, self.method))

    def _suggest(self, method):
        """The suggested rate by ``method``: 'steepest', the rate where the smoothed loss falls
        fastest against log(lr) from point ``skip_start`` to its minimum (falling back to
        'minimum' with fewer than 3 points there); 'minimum', a tenth of the rate at the minimum."""
        losses = np.array(self.losses, dtype=np.float64)
        finite = np.isfinite(losses)
        if not finite.any():
            return method, None
        lowest = int(np.argmin(np.where(finite, losses, np.inf)))
        if lowest == 0:             # never went down
            return method, None
        start = self.skip_start
        if method == 'steepest' and lowest - start >= 2:
            descent = losses[start:lowest + 1]
            slopes = np.gradient(descent, np.log10(self.lrs[start:lowest + 1]))
            return 'steepest', self.lrs[start + int(np.argmin(slopes))]
        return 'minimum', self.lrs[lowest] / 10.0

    def records(self):
        """The curve as a list of dicts ``{'lr', 'loss', 'smoothed_loss'}`` (non-finite losses
        as None)."""
        def number(x):
            return x if math.isfinite(x) else None
        return [{'lr': lr, 'loss': number(raw), 'smoothed_loss': number(smooth)}
                for lr, raw, smooth in zip(self.lrs, self.raw_losses, self.losses)]

    def save_json(self, path):
        """Write the curve, the suggestion and its method to ``path`` as JSON."""
        data = {'suggestion': self.suggestion, 'method': self.method, 'stop_reason': self.stop_reason,
                'curve': self.records()}
        text = json.dumps(data, indent=1).encode('utf-8')
        write_atomically(os.fspath(path), lambda f: f.write(text))

    def save_csv(self, path):
        """Write the curve to ``path`` as CSV: ``lr,loss,smoothed_loss`` (empty where not finite)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator='\n')
        writer.writerow(['lr', 'loss', 'smoothed_loss'])
        for row in self.records():
            writer.writerow(['' if row[k] is None else repr(row[k]) for k in ('lr', 'loss', 'smoothed_loss')])
        text = out.getvalue().encode('utf-8')
        write_atomically(os.fspath(path), lambda f: f.write(text))

    def plot(self, path):
        """Draw the smoothed loss against the rate (log scale), the raw losses faint behind it,
        the suggestion marked, into the PNG ``path``. Needs matplotlib (``pip install matplotlib``,
        in the ``examples`` extra): an ImportError says so."""
        figure = import_optional('matplotlib.figure', extra='examples', purpose='LRFinderResult.plot()')
        fig = figure.Figure(figsize=(6.0, 4.0), dpi=100, layout='constrained')
        ax = fig.add_subplot(1, 1, 1)
        ax.plot(self.lrs, self.raw_losses, color='C0', alpha=0.3, label='loss')
        ax.plot(self.lrs, self.losses, color='C0', label='smoothed loss')
        if self.suggestion is not None:
            ax.axvline(self.suggestion, color='C3', linestyle='--',
                       label='suggestion {:.3g} ({})'.format(self.suggestion, self.method))
        smoothed = [x for x in self.losses if math.isfinite(x)]
        if smoothed:     # from the lowest loss to a little above the start: the divergence would squash it
            low = min(smoothed + [x for x in self.raw_losses if math.isfinite(x)])
            high = max(smoothed[:max(1, len(smoothed) // 10)])
            margin = 0.1 * (high - low) or 0.1 * abs(high) or 1.0
            ax.set_ylim(low - margin, high + 2 * margin)
        ax.set_xscale('log')
        ax.set_xlabel('learning rate')
        ax.set_ylabel('loss')
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize='small')
        fig.savefig(os.fspath(path), format='png')

    def save(self, directory):
        """Write ``lr_finder.json``, ``lr_finder.csv`` and, when matplotlib can be imported,
        ``lr_finder.png`` into ``directory`` (created if missing); return the paths written."""
        directory = os.fspath(directory)
        os.makedirs(directory, exist_ok=True)
        paths = [os.path.join(directory, 'lr_finder.json'), os.path.join(directory, 'lr_finder.csv')]
        self.save_json(paths[0])
        self.save_csv(paths[1])
        try:
            self.plot(os.path.join(directory, 'lr_finder.png'))
            paths.append(os.path.join(directory, 'lr_finder.png'))
        except ImportError as err:
            logger.warn("find_learning_rate: no picture of the curve: {}".format(err))
        return paths


class _RateSweep(Callback):
    """Sets the learning rate of each step and records the step's loss; asks the trainer to stop
    when the loss diverges."""

    _chief_only = False

    def __init__(self, lrs, lr_name, smoothing, divergence):
        self.lrs, self.lr_name = lrs, lr_name
        self.smoothing, self.divergence = smoothing, divergence
        self.raw, self.smoothed = [], []
        self.stop_reason = None
        self._average = 0.0

    def _setup_graph(self):
        self._rate = GraphVarParam(self.lr_name)
        try:
            self._rate.setup_graph()
        except ValueError as err:
            raise ValueError(
                "find_learning_rate: no variable '{}' (lr_name) the rate can be set in: {} Its optimizer() "
                "must take its rate from a scalar variable, e.g. lr = tf.get_variable('{}', initializer=0.1, "
                "trainable=False); return tf.train.MomentumOptimizer(lr, 0.9)".format(
                    self.lr_name, err, self.lr_name)) from err
        self._cost = self.trainer.towers.training()[0].outputs
        self._fetch = tfv1.train.SessionRunArgs(fetches=self._cost)

    def _set_rate(self, index):
        self._rate.set_value(self.lrs[index])

    def _before_train(self):
        self._set_rate(0)

    def _before_run(self, ctx):
        return self._fetch

    def _after_run(self, run_context, run_values):
        self._value = float(run_values.results)

    def _trigger_step(self):
        value, beta = self._value, self.smoothing
        self.raw.append(value)
        index = len(self.raw)
        if math.isfinite(value):
            self._average = beta * self._average + (1 - beta) * value
            self.smoothed.append(self._average / (1 - beta ** index))
        else:
            self.smoothed.append(value)
        best = min((x for x in self.smoothed if math.isfinite(x)), default=math.inf)
        if not math.isfinite(value):
            self.stop_reason = "the loss is {} at lr {:.3g}".format(value, self.lrs[index - 1])
        elif self.divergence is not None and self.smoothed[-1] > self.divergence * best:
            self.stop_reason = "the smoothed loss {:.4g} at lr {:.3g} is above {:g} x its minimum " \
                "{:.4g}".format(self.smoothed[-1], self.lrs[index - 1], self.divergence, best)
        if self.stop_reason is not None:
            self.trainer.request_stop("find_learning_rate: " + self.stop_reason)
        elif index < len(self.lrs):
            self._set_rate(index)


def _copy_of(model):
    """A deep copy of ``model``, so that what its ``build_graph`` sets or appends (a tensor, a list
    of the towers seen) stays on the copy; a shallow copy when it cannot be deep-copied."""
    try:
        return copy.deepcopy(model)
    except (TypeError, copy.Error) as err:
        logger.info("find_learning_rate: {} cannot be deep-copied ({}): the sweep builds on a shallow "
                    "copy of it.".format(type(model).__name__, err))
        return copy.copy(model)


def _check_arguments(config, min_lr, max_lr, num_steps, smoothing, divergence, method, dataflow,
                     session_init):
    if not isinstance(config, TrainConfig):
        raise TypeError("find_learning_rate: config must be a TrainConfig, got {!r}".format(config))
    if config.model is None:
        raise ValueError("find_learning_rate: config has no model (TrainConfig(model=...))")
    for name, value in (('min_lr', min_lr), ('max_lr', max_lr)):
        if not is_real(value) or not 0 < value < math.inf:
            raise ValueError("find_learning_rate: {} must be a number > 0, got {!r}".format(name, value))
    if not min_lr < max_lr:
        raise ValueError("find_learning_rate: min_lr must be below max_lr, got min_lr={!r} >= "
                         "max_lr={!r}".format(min_lr, max_lr))
    if not is_int(num_steps) or num_steps < 2:
        raise ValueError("find_learning_rate: num_steps must be an int >= 2, got {!r}".format(num_steps))
    if not is_real(smoothing) or not 0 <= smoothing < 1:
        raise ValueError("find_learning_rate: smoothing must be a number in [0, 1), got {!r}".format(
            smoothing))
    if divergence is not None and (not is_real(divergence) or not divergence > 1):
        raise ValueError("find_learning_rate: divergence must be a number > 1 or None, got {!r}".format(
            divergence))
    if method not in _METHODS:
        raise ValueError("find_learning_rate: method must be one of {}, got {!r}".format(_METHODS, method))
    if session_init is not None and not isinstance(session_init, SessionInit):
        raise TypeError("find_learning_rate: session_init must be a SessionInit or None, got {!r}".format(
            session_init))
    dataflow = config.dataflow if dataflow is None else dataflow
    if not isinstance(dataflow, DataFlow):
        raise ValueError("find_learning_rate: needs a DataFlow, config.dataflow or dataflow=, got {!r} (an "
                         "InputSource, TrainConfig(data=...), feeds one trainer only: give its DataFlow as "
                         "dataflow=)".format(dataflow))
    return dataflow


def find_learning_rate(config, min_lr=1e-7, max_lr=10.0, num_steps=100, smoothing=0.9, divergence=4.0,
                       method='steepest', lr_name='learning_rate', dataflow=None, session_init=None,
                       output_dir=None, seed=None):
    """The learning-rate range test (as Lightning's ``Tuner.lr_find`` and fastai's ``lr_find``): train
    a copy of ``config.model`` for ``num_steps`` steps, the rate of step ``i`` being ``min_lr *
    (max_lr / min_lr) ** (i / (num_steps - 1))``, record the loss of each step and suggest a rate.

    The sweep builds its own graph with a :class:`SimpleTrainer` (``CHECK_COST`` off, the config's
    ``mixed_precision``), starts from the weights a new run starts with (or ``session_init``'s,
    read only: not ``config.session_init``, which may resume a run whose weights have learned
    already) and runs none of the config's callbacks or monitors: it writes nothing
    into the logger directory (detached meanwhile, see
    :func:`~tensorpack_lite.utils.logger.without_logger_dir`) or any checkpoint directory, and
    leaves the default graph, the logger and ``config.model`` as they were (it builds on a deep copy
    of the model). The data is read from ``dataflow`` (default ``config.dataflow``), repeated as
    needed.

    The loss is smoothed by an exponential moving average (``smoothing``, bias-corrected); the
    sweep stops early when a loss is not finite or the smoothed loss exceeds ``divergence`` times
    its minimum so far. The suggestion (``method``) is by default 'steepest': the rate where the
    smoothed loss falls fastest against log(lr) before its minimum, the first ``1 / (1 -
    smoothing)`` points (where the average settles) passed over. There the model learns fastest,
    and it lies well below the rate where the loss turns up (typically a decade or more), so it
    is a rate the model trains at, without the guess of a factor; 'minimum' is a tenth of the rate
    at the minimum of the smoothed loss (fastai's old rule), the fallback when fewer than 3 points
    lie before the minimum. ``smoothing`` is 0.9 (Lightning and fastai use 0.98): over ~100 steps
    a stronger average lags by tens of steps (the curve and its minimum shift to higher rates).
    Each step is one update (``config.accumulate`` is not used).

    Args:
        config (TrainConfig): the model (its ``optimizer()`` must take its rate from the variable
            ``lr_name``) and its data.
        min_lr, max_lr (float): the first and the last rate, 0 < min_lr < max_lr.
        num_steps (int): steps of the sweep (>= 2).
        smoothing (float): the moving average's decay, in [0, 1) (0: no smoothing).
        divergence (float): stop when the smoothed loss is above this times its minimum (> 1;
            None: never stop early but for a loss that is not finite).
        method (str): 'steepest' or 'minimum'.
        lr_name (str): the learning-rate variable.
        dataflow (DataFlow): the data, when not ``config.dataflow`` (a config with ``data=``).
        session_init (SessionInit): where the weights of the sweep come from (e.g.
            ``SmartInit('pretrained.npz')`` to fine-tune); None: initialized as in a new run.
        output_dir (str): where to write ``lr_finder.json``, ``lr_finder.csv`` and, when matplotlib
            can be imported (else one warning says so), ``lr_finder.png``
            (:meth:`LRFinderResult.save`); None: nothing is written.
        seed (int): the sweep graph's random seed (``tf.set_random_seed``), for a curve that is
            the same in every call (with data in a fixed order); None: initialized as a new run is.

    Returns:
        LRFinderResult: ``.lrs``, ``.losses``, ``.suggestion``, ``.plot(path)``.

    Example::

        result = find_learning_rate(TrainConfig(model=Model(), dataflow=BatchData(Digits('train'), 64)),
                                    min_lr=1e-5, max_lr=10, output_dir='lr_find')
        print(result.suggestion)     # then set the rate of the real run
    """
    dataflow = _check_arguments(config, min_lr, max_lr, num_steps, smoothing, divergence, method, dataflow,
                                session_init)
    lrs = [min_lr * (max_lr / min_lr) ** (i / (num_steps - 1.0)) for i in range(num_steps)]
    lrs[-1] = float(max_lr)
    sweep = _RateSweep(lrs, lr_name, smoothing, divergence)
    model = _copy_of(config.model)
    with logger.without_logger_dir(), tfv1.Graph().as_default():
        logger.info("find_learning_rate: {} steps, lr {:.3g} to {:.3g}.".format(num_steps, min_lr, max_lr))
        if seed is not None:
            tfv1.set_random_seed(seed)
        trainer = SimpleTrainer()
        trainer.CHECK_COST = False
        if config.mixed_precision is not None:
            trainer.mixed_precision = config.mixed_precision
        trainer.setup_graph(model.get_input_signature(), FeedInput(dataflow), model.build_graph,
                            model.optimizer)
        trainer.train([sweep], [], config.session_creator, session_init or JustCurrentSession(),
                      steps_per_epoch=num_steps, starting_epoch=1, max_epoch=1)
        done = len(sweep.raw)
        result = LRFinderResult(lrs[:done], sweep.raw, sweep.smoothed, method, sweep.stop_reason,
                                skip_start=math.ceil(1 / (1 - smoothing) - 1e-9))
        logger.info("find_learning_rate: {!r}.".format(result))
    if output_dir is not None:
        result.save(output_dir)
    return result
