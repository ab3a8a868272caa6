"""A monitor that tracks the run in MLflow: :class:`MLflowMonitor`."""

import collections
import json
import os
import re
import socket
import time
import urllib.parse

from ...checkpoint.files import checkpoint_files
from ...libinfo import __version__
from ...tfutils.collect_env import collect_env_info
from ...utils import logger, stats_json
from ...utils.develop import import_optional
from ...utils.fs import write_atomically
from ...utils.outbox import Outbox, PermanentSendError
from .group import MonitorBase
from .tracking import FINISHED, TrackerRecord, check_parameters, last_checkpoint, run_outcome, run_parameters

__all__ = ['MLflowMonitor']

# what MLflow takes in a metric's name; other characters become '_' (a name the server refuses
# anyway is dropped alone, with one error)
_NOT_IN_NAMES = re.compile(r'[^\w\-. :/]')

# errors of the tracking server that sending again cannot fix
_REFUSALS = frozenset(['INVALID_PARAMETER_VALUE', 'RESOURCE_DOES_NOT_EXIST', 'RESOURCE_ALREADY_EXISTS',
                       'BAD_REQUEST', 'PERMISSION_DENIED', 'INVALID_STATE', 'UNAUTHENTICATED'])
# the refusal of a batch that one of its values can cause (the others are about the run)
_VALUE_REFUSED = 'INVALID_PARAMETER_VALUE'
# seconds the end of training waits for a call to the server in progress once it stops waiting
# for the rest (a call that fails gives its values back to mlflow-unsent.json)
_CALL_END_WAIT = 1.0


class MLflowMonitor(MonitorBase):
    """Tracks the run in MLflow: its parameters once, every scalar at its global step, the
    ``stats.json`` and the last checkpoint as artifacts at the end, and how the run ended
    (``FINISHED``; ``FAILED`` with the error in the tag ``tensorpack_lite.error``; ``KILLED``
    after SIGTERM or Ctrl-C).

    **Resuming.** The run's id is kept in ``mlflow-run.json`` in the logger directory. A run
    started again in that directory (``AutoResumeTrainConfig``, a requeued job, an elastic
    resize) logs into the same MLflow run, and its metrics go on at the resumed step: a value
    at a step the run already logged is not logged again.

    **A server that is down or slow never stops or slows training.** Everything is sent by a
    thread of its own (:class:`~tensorpack_lite.utils.outbox.Outbox`), in batches. When the
    server refuses the connection, fails, or does not answer within ``answer_timeout``, one
    warning says so, and the values are kept (at most ``max_buffered``) and sent when it
    answers. At the end, the monitor waits for the rest to be sent while the server takes them
    (at most ``flush_timeout`` seconds; after an error or SIGTERM at most a quarter of the
    trainer's ``AFTER_FAILURE_TIMEOUT``, 5 s, then at most 1 s for a call in progress to end);
    what is still unsent then is written to ``mlflow-unsent.json`` and sent first by the next
    run in the directory. A metric the server refuses (e.g. a name it does not take) is
    dropped alone, with one error naming it: the other values of its batch are sent.

    Only the chief reports. Parameters are ``run_parameters(trainer, params)`` (the trainer's and
    the ``TrainConfig``'s settings, then ``params``); ``collect_env_info()`` is the artifact
    ``environment.txt``. MLflow keeps a parameter's first value: a resumed run whose parameters
    differ (e.g. ``world_size`` after a resize) keeps the first and logs which differ.

    Args:
        tracking_uri (str): where MLflow keeps runs, e.g. ``'http://127.0.0.1:5000'`` or
            ``'sqlite:///mlflow.db'``; by default MLflow's own (``MLFLOW_TRACKING_URI``, else
            its default).
        experiment_name (str): by default ``MLFLOW_EXPERIMENT_NAME``, else MLflow's default
            experiment.
        run_name (str): the run's name (MLflow makes one up otherwise).
        params (dict): more parameters, e.g. hyper-parameters.
        tags (dict): tags of the run.
        log_checkpoint (bool): upload the last checkpoint at the end.
        flush_timeout (float): the most seconds the end of training waits for values to be sent.
        answer_timeout (float): a call to the server taking longer counts as failed.
        max_buffered (int): the most values kept while the server does not take them.

    Example::

        # mlflow server --backend-store-uri sqlite:///mlflow.db --port 5000
        MLflowMonitor('http://127.0.0.1:5000', experiment_name='mnist', params={'lr': 1e-3})
    """

    RECORD = 'mlflow-run.json'
    UNSENT = 'mlflow-unsent.json'

    def __init__(self, tracking_uri=None, experiment_name=None, run_name=None, params=None, tags=None,
                 log_checkpoint=True, flush_timeout=30.0, answer_timeout=10.0, max_buffered=100000):
        mlflow = import_optional('mlflow', extra='mlflow', purpose='MLflowMonitor')
        check_parameters(params, 'MLflowMonitor')
        check_parameters(tags, 'MLflowMonitor (tags)')
        for name, value in (('flush_timeout', flush_timeout), ('answer_timeout', answer_timeout)):
            if not value > 0:
                raise ValueError("MLflowMonitor: {} must be a positive number of seconds, got {!r}".format(
                    name, value))
        self._mlflow = mlflow
        self.tracking_uri = tracking_uri or mlflow.get_tracking_uri()
        self.experiment_name = experiment_name or os.environ.get('MLFLOW_EXPERIMENT_NAME')
        self.run_name = run_name
        self._params = dict(params or {})
        self._tags = {name: str(value) for name, value in (tags or {}).items()}
        self._log_checkpoint = bool(log_checkpoint)
        self._flush_timeout = float(flush_timeout)
        self._answer_timeout = float(answer_timeout)
        self._max_buffered = int(max_buffered)
        self.run_id = None
        """The MLflow run's id, once the server created (or reopened) it."""
        self._outbox = None
        self._pending = {}          # name -> value, all put at self._pending_step
        self._pending_step = None
        self._logged_until = -1     # the steps up to this one were logged by an earlier attempt
        self._skipped = 0
        self._renamed = set()
        self._refused = set()       # the names of metrics the server refused (their values are dropped)

    _chief_only = True

    def __str__(self):
        return "MLflowMonitor({})".format(self.tracking_uri)

    # ----- the training thread ------------------------------------------------------------------

    def _setup_graph(self):
        if logger.get_logger_dir() is None:
            raise ValueError("MLflowMonitor keeps its run's id in the logger directory, so that a resumed "
                             "run goes on in the same MLflow run: call logger.set_logger_dir() first.")

    def _before_train(self):
        directory = logger.get_logger_dir()
        self._record = TrackerRecord(self.RECORD, directory)
        self._unsent_path = os.path.join(directory, self.UNSENT)
        earlier = self._record.read()
        if earlier is not None and earlier.get('tracking_uri') != self.tracking_uri:
            logger.warn("{}: {} names a run at {}, not at {}: a new run starts.".format(
                self, self._record.path, earlier.get('tracking_uri'), self.tracking_uri))
            earlier = None
        self._earlier = earlier or {}
        self._client = self._mlflow.tracking.MlflowClient(tracking_uri=self.tracking_uri)
        self._outbox = Outbox(self._send, str(self), max_items=self._max_buffered,
                              answer_timeout=self._answer_timeout)
        unsent = self._read_unsent()
        self._logged_until = max([int(self._earlier.get('last_step', -1))] +
                                 [item['step'] for item in unsent if item['op'] == 'metric'])
        self._outbox.put({'op': 'open', 'params': run_parameters(self.trainer, self._params, str(self))})
        for item in unsent:
            if item['op'] not in ('open', 'end'):     # this run opens and ends for itself
                self._outbox.put(item)
        if earlier is not None:
            logger.info("{}: goes on in the run {} (its steps up to {} are logged).".format(
                self, earlier.get('run_id'), self._logged_until))

    def _read_unsent(self):
        if not os.path.isfile(self._unsent_path):
            return []
        try:
            with open(self._unsent_path) as f:
                kept = json.load(f)
            uri, items = kept['tracking_uri'], list(kept['items'])
        except (OSError, ValueError, TypeError, KeyError) as err:
            logger.warn("{}: cannot read {} ({}: {}); its values are lost.".format(
                self, self._unsent_path, type(err).__name__, err))
            return []
        if uri != self.tracking_uri:
            logger.warn("{}: {} holds values for {}, not for {}: they are not sent.".format(
                self, self._unsent_path, uri, self.tracking_uri))
            return []
        logger.info("{}: {} value(s) that the last run could not send are sent first.".format(
            self, len(items)))
        return items

    def process_scalar(self, name, value):
        if _NOT_IN_NAMES.search(name):
            key = _NOT_IN_NAMES.sub('_', name)
            if name not in self._renamed:
                self._renamed.add(name)
                logger.warn("{}: MLflow does not take the name '{}': logged as '{}'.".format(self, name, key))
            name = key
        step = self.global_step
        if step <= self._logged_until:
            self._skipped += 1
            return
        if step != self._pending_step:
            self._put_pending()
            self._pending_step = step
        self._pending[name] = float(value)

    def _put_pending(self):
        """Queue the scalars of the last step: one value per name and step, the last put (as in
        ``stats.json``)."""
        if self._outbox is None:    # put before before_train ran: queued with the next step's
            return
        now = int(time.time() * 1000)
        for name, value in self._pending.items():
            self._outbox.put({'op': 'metric', 'key': name, 'value': value, 'timestamp': now,
                              'step': self._pending_step})
        self._pending = {}

    def _trigger(self):
        self._put_pending()

    def _after_train(self):
        if self._outbox is None:     # before_train did not run
            return
        self._put_pending()
        if self._skipped:
            logger.info("{}: {} value(s) at steps up to {}, which the run had logged before it was resumed, "
                        "were not logged again.".format(self, self._skipped, self._logged_until))
        directory = os.path.dirname(self._record.path)
        stats = stats_json.stats_path(directory)
        if os.path.isfile(stats):
            self._outbox.put({'op': 'artifact', 'path': stats, 'dir': None})
        if self._log_checkpoint:
            for path in self._last_checkpoint_files(directory):
                self._outbox.put({'op': 'artifact', 'path': path, 'dir': 'checkpoint'})
        status, why = run_outcome(self.trainer.loop)
        self._outbox.put({'op': 'end', 'status': status, 'why': why})
        reachable = self._server_takes_connections()
        if reachable and self._outbox.drain(self._flush_time()):
            self._outbox.close()
            if os.path.isfile(self._unsent_path):
                os.remove(self._unsent_path)
            return
        unsent = self._outbox.close(timeout=_CALL_END_WAIT)
        kept = {'tracking_uri': self.tracking_uri, 'items': unsent}
        write_atomically(self._unsent_path, lambda f: json.dump(kept, f), mode='w')
        logger.warn("{}: {} item(s) were not sent (the server {}); kept in {}, sent by the next run in this "
                    "directory.".format(self, len(unsent),
                                        'does not answer' if self._outbox.failing or not reachable
                                        else 'was too slow',
                                        self._unsent_path))
        if self._outbox.in_flight:
            logger.warn("{}: {} more item(s) were being sent when training ended: not kept, since the server "
                        "may still take them.".format(self, self._outbox.in_flight))

    def _flush_time(self):
        """How long the end of training may wait for the values to be sent: ``flush_timeout``, and
        after a failure or SIGTERM at most a quarter of the time the trainer gives every callback's
        ``after_train`` then (``AFTER_FAILURE_TIMEOUT``)."""
        if self.trainer.loop.failure is None:
            return self._flush_timeout
        return min(self._flush_timeout, getattr(self.trainer, 'AFTER_FAILURE_TIMEOUT', 20.0) / 4)

    def _server_takes_connections(self):
        """False when the tracking URI names a server that refuses a connection now (then the end
        of training does not wait for it: MLflow's client would retry for minutes); True for
        other URIs (a local database) and for a server that takes it."""
        address = urllib.parse.urlsplit(self.tracking_uri)
        if address.scheme not in ('http', 'https') or not address.hostname:
            return True
        port = address.port or (443 if address.scheme == 'https' else 80)
        try:
            socket.create_connection((address.hostname, port), timeout=min(self._answer_timeout, 2.0)).close()
        except OSError:
            return False
        return True

    def _last_checkpoint_files(self, directory):
        """The files of the newest checkpoint: its data, index and resume states."""
        prefix = last_checkpoint(directory)
        if prefix is None:
            return []
        return checkpoint_files(prefix, resume=True)

    # ----- the outbox's thread --------------------------------------------------------------------

    def _send(self, items):
        """Send the leading items (see :class:`Outbox`); returns how many were sent."""
        first = items[0]
        if first['op'] == 'metric':
            return self._send_metric_items(_leading(items, 'metric'))
        try:
            getattr(self, '_send_' + first['op'])(first)
            return 1
        except self._mlflow.exceptions.MlflowException as err:
            if err.error_code in _REFUSALS and first['op'] != 'open':   # without a run, nothing else goes
                raise PermanentSendError(1, _first_line(err)) from err
            raise

    def _send_metric_items(self, metrics):
        """Send ``metrics`` in as few batches as the server takes: a batch refused for one of its
        values is split in halves until the value refused is alone, and only that metric's
        values are dropped (its name, logged once, is not sent again). Returns how many leading
        items are done (sent or dropped); raises as :class:`Outbox` expects when none is."""
        MlflowException = self._mlflow.exceptions.MlflowException
        chunks, done = collections.deque([metrics]), 0
        while chunks:
            chunk = chunks.popleft()
            wanted = [item for item in chunk if item['key'] not in self._refused]
            try:
                if wanted:
                    self._send_metrics(wanted)
            except MlflowException as err:
                if err.error_code == _VALUE_REFUSED and len(wanted) > 1:
                    half = len(chunk) // 2
                    chunks.extendleft([chunk[half:], chunk[:half]])
                    continue
                if err.error_code == _VALUE_REFUSED:
                    key = wanted[0]['key']
                    self._refused.add(key)
                    logger.error("{}: the server refused the metric '{}', whose values are dropped (the "
                                 "other metrics are sent): {}".format(self, key, _first_line(err)))
                elif done:
                    return done     # the rest goes in the next call, which says what failed
                elif err.error_code in _REFUSALS:
                    raise PermanentSendError(len(metrics), _first_line(err)) from err
                else:
                    raise
            except Exception:
                if done:
                    return done
                raise
            done += len(chunk)
        return done

    def _send_open(self, item):
        """Reopen the recorded run, or create one; then log the parameters and the environment."""
        run_id = self._earlier.get('run_id')
        if run_id is not None:
            try:
                run = self._client.get_run(run_id)
            except self._mlflow.exceptions.MlflowException as err:
                if err.error_code != 'RESOURCE_DOES_NOT_EXIST':
                    raise
                logger.warn("{}: the run {} recorded in {} is gone from the server: a new run starts.".format(
                    self, run_id, self._record.path))
                self._logged_until, run_id = -1, None
        if run_id is None:
            run = self._client.create_run(self._experiment_id(), run_name=self.run_name,
                                          tags=dict(self._tags, **{'tensorpack_lite.version': __version__}))
            self._client.log_text(run.info.run_id, collect_env_info(), 'environment.txt')
        else:
            self._client.update_run(run_id, status='RUNNING')
        self.run_id = run.info.run_id
        self._earlier = dict(self._earlier, run_id=self.run_id)
        self._write_record()
        self._log_params(run, item['params'])

    def _experiment_id(self):
        if self.experiment_name is None:
            return os.environ.get('MLFLOW_EXPERIMENT_ID', '0')
        experiment = self._client.get_experiment_by_name(self.experiment_name)
        if experiment is not None:
            return experiment.experiment_id
        return self._client.create_experiment(self.experiment_name)

    def _log_params(self, run, params):
        Param = self._mlflow.entities.Param
        logged = run.data.params
        changed = sorted(name for name, value in params.items()
                         if name in logged and logged[name] != str(value))
        if changed:
            logger.warn("{}: the resumed run's {} differ from the values MLflow keeps ({}); MLflow keeps the "
                        "first.".format(self, ', '.join(changed),
                                        ', '.join('{}={}'.format(n, logged[n]) for n in changed)))
        new = [Param(name, str(value)) for name, value in sorted(params.items()) if name not in logged]
        for start in range(0, len(new), 100):     # MLflow takes at most 100 parameters at once
            self._client.log_batch(self.run_id, params=new[start:start + 100])

    def _send_metrics(self, items):
        Metric = self._mlflow.entities.Metric
        self._client.log_batch(self.run_id, metrics=[
            Metric(item['key'], item['value'], item['timestamp'], item['step']) for item in items])
        self._earlier['last_step'] = max(int(self._earlier.get('last_step', -1)),
                                         max(item['step'] for item in items))
        self._write_record()

    def _send_artifact(self, item):
        if os.path.isfile(item['path']):
            self._client.log_artifact(self.run_id, item['path'], artifact_path=item['dir'])

    def _send_end(self, item):
        if item['status'] != FINISHED and item['why']:
            self._client.set_tag(self.run_id, 'tensorpack_lite.error', item['why'][:5000])
        self._client.set_terminated(self.run_id, item['status'])

    def _write_record(self):
        self._record.write(dict(self._earlier, tracking_uri=self.tracking_uri))


def _first_line(err):
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def _leading(items, op):
    """The items at the start of ``items`` whose op is ``op``."""
    leading = []
    for item in items:
        if item['op'] != op:
            break
        leading.append(item)
    return leading
