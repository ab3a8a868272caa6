"""The run's hyper-parameters and final metrics for TensorBoard's HParams tab:
:class:`TensorBoardHParams`."""

import glob
import os
import time
import types

from ...compat import tf, tfv1
from ...utils import logger
from ...utils.develop import import_optional
from .group import MonitorBase, NoOpMonitor
from .tracking import FAILED, FINISHED, KILLED, check_parameters, run_outcome, run_parameters
from .writers import event_file_suffix

__all__ = ['TensorBoardHParams']

_MARK = '.hparams'   # how the names of this monitor's event files end

# TensorBoard's session status for each way a run ends (tracking.run_outcome). TensorBoard has no
# status for a run stopped from outside (SIGTERM, Ctrl-C): STATUS_UNKNOWN is what it shows for a
# session that did not end, which such a run has not, as far as a resumed run is concerned.
_STATUS = {FINISHED: 'STATUS_SUCCESS', FAILED: 'STATUS_FAILURE', KILLED: 'STATUS_UNKNOWN'}


def _hparams_api():
    """TensorBoard's hparams modules as attributes: api_pb2, metadata, summary, summary_v2."""
    modules = {}
    for name in ('api_pb2', 'metadata', 'summary', 'summary_v2'):
        modules[name] = import_optional('tensorboard.plugins.hparams.' + name, extra='tensorboard',
                                        purpose='TensorBoardHParams')
    return types.SimpleNamespace(**modules)


def _check_arguments(params, metrics, trial_id):
    """Raise TypeError for bad arguments; the metric names as a list without repeats (None: all)."""
    check_parameters(params, 'TensorBoardHParams')
    if trial_id is not None and not (isinstance(trial_id, str) and trial_id):
        raise TypeError("TensorBoardHParams: trial_id must be a non-empty str, got {!r}".format(trial_id))
    if metrics is None:
        return None
    if (isinstance(metrics, (str, bytes)) or not hasattr(metrics, '__iter__')
            or not all(isinstance(name, str) and name for name in metrics)):
        raise TypeError("TensorBoardHParams: metrics must be a list of scalar names (non-empty str), "
                        "got {!r}".format(metrics))
    return list(dict.fromkeys(metrics))


class TensorBoardHParams(MonitorBase):
    """Shows the run in TensorBoard's HParams tab: its parameters, how it ended and the final value
    of its metrics, written into an event file of its own in the logger directory (or ``logdir``).

    * Before training: the session start, with the parameters ``run_parameters(trainer, params)``
      (the trainer's and the ``TrainConfig``'s settings, then ``params``) in the session group
      ``trial_id``, and the experiment config: the parameters with their types, and the metrics.
    * After training, also after an error: the last value put of each metric, as a scalar at the
      last global step (so the tab has it without a :class:`TFEventWriter`), then the session end:
      ``STATUS_SUCCESS`` when the run finished (or was stopped on purpose), ``STATUS_FAILURE``
      after an error, ``STATUS_UNKNOWN`` after SIGTERM or Ctrl-C (TensorBoard has no "killed";
      a session that never ended shows the same).

    **Metrics** are the scalars put into the monitors that ``metrics`` names, or all of them with
    ``metrics=None``. TensorBoard takes the first experiment config, session start and session end
    of a directory and ignores later ones, so with ``metrics=None`` the config is written once, at
    the end, with the names seen; until then the tab lists the scalars it finds in the directory.

    **Resuming.** A directory is one TensorBoard run, hence one session. A run started again in it
    (``AutoResumeTrainConfig``) replaces the event file of the earlier attempt's
    ``TensorBoardHParams``, keeping its start time and the metric values not put again: the tab
    shows one session with the final status (a TensorBoard already running shows it once restarted).

    Only the chief writes. Without ``logdir`` and without a logger directory, constructing it
    logs a warning and returns a :class:`NoOpMonitor`. Needs the ``tensorboard`` package
    (``pip install 'tensorpack_lite[tensorboard]'``).

    Args:
        params (dict): more parameters (names to bools, numbers and strings), e.g. ``{'lr': 0.1}``.
        metrics (list[str]): the scalars to show, e.g. ``['val-error', 'cost']``; None: all.
        logdir (str): an existing directory; defaults to the logger directory.
        trial_id (str): the session group: TensorBoard groups sessions of one name and averages
            their metrics. Defaults to a hash of the parameters (runs with equal ones are grouped).

    Example::

        logger.set_logger_dir('train_log/depth18')
        config = TrainConfig(..., monitors=[TFEventWriter(), JSONWriter(),
                                            TensorBoardHParams({'depth': 18}, metrics=['val-error'])])
        # tensorboard --logdir train_log     (the HParams tab compares the runs under train_log)
    """

    _chief_only = True

    def __new__(cls, params=None, metrics=None, logdir=None, trial_id=None):
        _check_arguments(params, metrics, trial_id)
        if logdir is None and logger.get_logger_dir() is None:
            logger.warn("The logger directory was not set and TensorBoardHParams got no logdir: "
                        "TensorBoardHParams is replaced by a NoOpMonitor.")
            return NoOpMonitor('TensorBoardHParams')
        return super().__new__(cls)

    def __init__(self, params=None, metrics=None, logdir=None, trial_id=None):
        self._metrics = _check_arguments(params, metrics, trial_id)
        logdir = logger.get_logger_dir() if logdir is None else logdir
        if not os.path.isdir(logdir):
            raise ValueError("TensorBoardHParams: logdir '{}' is not an existing directory.".format(logdir))
        self._tb = _hparams_api()
        self._logdir = os.path.normpath(logdir)
        self._params = dict(params or {})
        self._trial_id = trial_id
        self._writer = None
        self._last = {}   # metric name -> (global step, value): the last value put

    @property
    def logdir(self):
        return self._logdir

    def __str__(self):
        return "TensorBoardHParams({})".format(self._logdir)

    def _setup_graph(self):
        self._writer = None
        self._last = {}

    def process_scalar(self, name, value):
        if self._metrics is None or name in self._metrics:
            self._last[name] = (self.global_step, float(value))

    def _before_train(self):
        self._start()

    def _after_train(self):
        if self._writer is None:   # training failed before our before_train
            self._start()
        status, why = run_outcome(self.trainer.loop)
        step = self.global_step
        missing = [name for name in self._metrics or [] if name not in self._last]
        if missing:
            logger.warn("{}: no value of {} was put into the monitors: not shown.".format(
                self, ', '.join(repr(name) for name in missing)))
        try:
            if self._metrics is None:
                self._write(self._config(sorted(self._last), self._run_params), step)
            self._write(self._scalars({name: value for name, (_, value) in self._last.items()}), step)
            end = self._tb.summary.session_end_pb(self._tb.api_pb2.Status.Value(_STATUS[status]), time.time())
            self._write(end, step)
        finally:
            self._writer.close()
        logger.info("{}: the session ended with {}{}.".format(
            self, _STATUS[status], " ({})".format(why) if why else ""))

    def _start(self):
        """Write the session start (and the config when the metrics are known) into a new file,
        then remove the files of earlier attempts, after carrying over what they hold."""
        pattern = os.path.join(glob.escape(self._logdir), 'events.out.tfevents.*' + _MARK)
        earlier = sorted(glob.glob(pattern))
        started, carried = self._read_earlier(earlier)
        params = self._run_params = run_parameters(self.trainer, self._params, str(self))
        start = self._tb.summary_v2.hparams_pb(params, trial_id=self._trial_id,
                                               start_time_secs=started or time.time())
        # after TFEventWriter's file in TensorBoard's order: read before it, the final values
        # written here at the last step would be purged by its earlier steps of the same tags
        suffix = event_file_suffix() + _MARK
        self._writer = tfv1.summary.FileWriter(self._logdir, filename_suffix=suffix)
        step = self.global_step
        if self._metrics is not None:
            self._write(self._config(self._metrics, params), step)
        self._write(tfv1.Summary.FromString(start.SerializeToString()), step)   # TensorBoard's proto to TF's
        for name, (at, value) in sorted(carried.items()):
            if (self._metrics is None or name in self._metrics) and name not in self._last:
                self._last[name] = (at, value)
                self._write(self._scalars({name: value}), at)
        self._writer.flush()
        for path in earlier:
            try:
                os.remove(path)
            except OSError as err:
                logger.warn("{}: cannot remove '{}' of an earlier attempt ({}): TensorBoard may show "
                            "its session instead.".format(self, path, err))
        if earlier:
            logger.info("{}: this run's session replaces the one of the earlier attempt(s).".format(self))

    def _read_earlier(self, paths):
        """From event files of earlier attempts: the earliest session start time (None if none)
        and the last value of each metric, ``{name: (step, value)}``."""
        started, carried = None, {}
        metadata = self._tb.metadata
        for path in paths:
            try:
                for event in tfv1.train.summary_iterator(path):
                    for value in event.summary.value:
                        if value.tag == metadata.SESSION_START_INFO_TAG:
                            content = value.metadata.plugin_data.content
                            when = metadata.parse_session_start_info_plugin_data(content).start_time_secs
                            started = when if started is None else min(started, when)
                        elif value.WhichOneof('value') == 'simple_value':
                            carried[value.tag] = (event.step, value.simple_value)
            except (tf.errors.OpError, OSError) as err:
                logger.warn("{}: cannot read all of '{}' ({}: {}).".format(
                    self, path, type(err).__name__, err))
        return started, carried

    def _config(self, metrics, params):
        """The experiment config: the names of ``params`` with their types, and ``metrics``."""
        api = self._tb.api_pb2
        kinds = [(bool, api.DATA_TYPE_BOOL), ((int, float), api.DATA_TYPE_FLOAT64),
                 (str, api.DATA_TYPE_STRING)]
        infos = [api.HParamInfo(name=name, type=next(t for kind, t in kinds if isinstance(value, kind)))
                 for name, value in sorted(params.items())]
        return self._tb.summary.experiment_pb(
            infos, [api.MetricInfo(name=api.MetricName(tag=name)) for name in metrics])

    @staticmethod
    def _scalars(values):
        return tfv1.Summary(value=[tfv1.Summary.Value(tag=name, simple_value=value)
                                   for name, value in sorted(values.items())])

    def _write(self, summary, step):
        self._writer.add_summary(summary, step)
