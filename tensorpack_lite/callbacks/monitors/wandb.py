"""A monitor that sends the statistics of a run to Weights & Biases: :class:`WandbMonitor`."""

import os
import shutil

from ...checkpoint.files import checkpoint_files
from ...tfutils.collect_env import collect_env_info
from ...utils import logger, stats_json
from ...utils.develop import import_optional
from .group import MonitorBase
from .tracking import (FINISHED, KILLED, TrackerRecord, check_parameters, last_checkpoint, run_outcome,
                       run_parameters)

__all__ = ['WandbMonitor']

_MODES = ('online', 'offline', 'disabled', 'shared')
_SET_HERE = {
    'id': "the run id comes from wandb-run.json in the logger directory",
    'resume': "a run resumed in the same logger directory resumes its W&B run by itself",
    'resume_from': "a run resumed in the same logger directory resumes its W&B run by itself",
    'fork_from': "WandbMonitor starts or resumes the run of its logger directory",
    'config': "pass the parameters as params=",
}


class WandbMonitor(MonitorBase):
    """Sends the scalars put into the monitors to a Weights & Biases run, one row per global
    step, and keeps the run's parameters, environment, statistics and last checkpoint with it.
    Chief only; needs the logger directory (ValueError when the callbacks are set up).

    * Before training: a W&B run starts with its files in ``<dir>/wandb``, the parameters of
      :func:`~tensorpack_lite.callbacks.monitors.tracking.run_parameters` (the trainer's, then
      ``params``) as its config, and :func:`~tensorpack_lite.tfutils.collect_env.collect_env_info`
      as its file ``environment.txt``. Its id is kept in ``wandb-run.json`` in the logger
      directory, so that a run resumed there (:class:`AutoResumeTrainConfig`) goes on in it.
    * Scalars: those of one step are sent together when the step moves on, at each epoch's end
      and after training (a name put twice at a step: the last value, as in ``stats.json``).
      W&B wants increasing steps: a resumed run does not send again the steps up to the last
      one sent before (kept in ``wandb-run.json`` at each epoch's end), and says in one line
      how many values it left out; a value put at a step already sent is left out with a
      warning. Images are not sent.
    * After training: ``stats.json`` and the newest checkpoint of the logger directory (its
      ``.index`` and ``.data-*`` files, hard-linked or copied) are saved with the run; the
      summary gets ``status`` (``FINISHED``, ``FAILED`` or ``KILLED``, from
      :func:`~tensorpack_lite.callbacks.monitors.tracking.run_outcome`) and ``error`` when it did not
      finish; the run ends with exit code 0 when finished, 1 after an error, and after SIGTERM
      or Ctrl-C the process's exit status (marked as preempted: it resumes later).

    Once the run started, W&B's errors never stop training: the first one is logged, nothing
    more is sent, and the run is still finished.

    Args:
        project (str): the W&B project; by default the one recorded for a resumed run, else
            W&B's default (``WANDB_PROJECT``).
        name (str): the run's display name.
        params (dict): more parameters for the config, e.g. ``{'lr': 0.1}``.
        mode (str): ``'online'``, ``'offline'``, ``'disabled'`` or ``'shared'``; by default
            W&B's (``WANDB_MODE``).
        dir (str): where W&B keeps its files; defaults to the logger directory.
        init_kwargs: more arguments of ``wandb.init`` (``entity``, ``tags``, ``group``,
            ``settings``...), except ``id``, ``resume`` and ``config``, set here.

    Example::

        logger.set_logger_dir('train_log/run1', action='k')
        config = AutoResumeTrainConfig(
            model=Model(), dataflow=df, max_epoch=10, callbacks=[ModelSaver()],
            monitors=DEFAULT_MONITORS() + [WandbMonitor(project='mnist', params={'depth': 18})])
        launch_train_with_config(config, SimpleTrainer())
    """

    _chief_only = True
    RECORD = 'wandb-run.json'
    """The file in the logger directory that keeps the run id and the last step sent."""

    def __init__(self, project=None, name=None, params=None, mode=None, dir=None, **init_kwargs):
        self._wandb = import_optional('wandb', extra='wandb', purpose='WandbMonitor')
        for arg, value in (('project', project), ('name', name)):
            if value is not None and (not isinstance(value, str) or not value):
                raise TypeError("WandbMonitor: {} must be a non-empty str or None, got {!r}".format(
                    arg, value))
        check_parameters(params, 'WandbMonitor')
        if mode is not None and mode not in _MODES:
            raise ValueError("WandbMonitor: mode must be one of {} or None (W&B's default), got {!r}".format(
                ', '.join(map(repr, _MODES)), mode))
        if dir is not None and not isinstance(dir, (str, os.PathLike)):
            raise TypeError("WandbMonitor: dir must be a path (str) or None, got {!r}".format(dir))
        refused = sorted(set(init_kwargs) & set(_SET_HERE))
        if refused:
            raise ValueError("WandbMonitor: wandb.init argument '{}' cannot be given: {}.".format(
                refused[0], _SET_HERE[refused[0]]))
        self._project, self._name, self._params, self._mode = project, name, dict(params or {}), mode
        self._dir = None if dir is None else os.fspath(dir)
        self._init_kwargs = init_kwargs
        self._run = None

    @property
    def run(self):
        """The ``wandb`` run (None before training)."""
        return self._run

    def _setup_graph(self):
        self._logdir = logger.get_logger_dir()
        if self._logdir is None:
            raise ValueError("WandbMonitor needs the logger directory, where it keeps the W&B run: call "
                             "logger.set_logger_dir() before training.")
        self._record = TrackerRecord(self.RECORD, self._logdir)
        self._pending, self._pending_step = {}, None
        self._last_step = None      # the last step sent to the run, in any attempt
        self._resumed_up_to = None  # in a resumed run: the last step sent before
        self._skipped = 0           # values of a resumed run at steps sent before it
        self._warned_late = self._failed = False

    # ----- starting the run ------------------------------------------------------------------

    def _before_train(self):
        wandb = self._wandb
        found = self._record.read() or {}
        run_id = found.get('run_id') if isinstance(found.get('run_id'), str) else None
        project = self._project or found.get('project')
        if run_id is not None and self._project is not None and found.get('project') != self._project:
            logger.warn("WandbMonitor: {} names run {} of project {!r}, not of project {!r}: a new W&B run "
                        "starts.".format(self._record.path, run_id, found.get('project'), self._project))
            run_id = None
        directory = self._dir or self._logdir
        os.makedirs(directory, exist_ok=True)
        config = run_parameters(self.trainer, self._params, 'WandbMonitor')
        kwargs = dict(self._init_kwargs, project=project, name=self._name, mode=self._mode, dir=directory)
        if run_id is None:
            self._run = wandb.init(config=config, **kwargs)
            logger.info("WandbMonitor: started W&B run {} (project {}).".format(
                self._run.id, self._run.project))
        else:
            self._run = wandb.init(id=run_id, resume='allow', **kwargs)
            self._guard('setting the config', lambda: self._run.config.update(config, allow_val_change=True))
            last = found.get('last_step')
            self._resumed_up_to = self._last_step = last if isinstance(last, int) else None
            logger.info("WandbMonitor: resuming W&B run {} (project {}){}.".format(
                run_id, self._run.project,
                '' if last is None else ', whose last step sent is {}'.format(last)))
        self._write_record()
        self._guard('saving the environment', self._save_environment)

    def _save_environment(self):
        path = os.path.join(self._run.dir, 'environment.txt')
        with open(path, 'w') as f:
            f.write(collect_env_info() + '\n')
        self._run.save(path, base_path=self._run.dir, policy='now', glob=False)

    def _write_record(self):
        if getattr(self._run, 'disabled', False):
            return   # mode='disabled': there is no run to resume
        self._record.write({'run_id': self._run.id, 'project': self._run.project,
                            'last_step': self._last_step})

    def _guard(self, what, call):
        """Run ``call`` unless a W&B call failed before; the first failure is logged, not raised."""
        if self._failed:
            return
        try:
            call()
        except Exception as err:
            self._failed = True
            logger.warn("WandbMonitor: {} failed ({}: {}); nothing more is sent to W&B in this run, "
                        "training goes on.".format(what, type(err).__name__, err))

    # ----- scalars ---------------------------------------------------------------------------

    def process_scalar(self, name, value):
        step = self.global_step
        if step != self._pending_step:
            self._send_pending()
            self._pending_step = step
        self._pending[name] = value

    def _send_pending(self):
        if not self._pending or self._run is None:
            return   # before the run started, scalars wait (other callbacks' before_train)
        step, values = self._pending_step, self._pending
        self._pending = {}
        if self._last_step is not None and step <= self._last_step:
            if self._resumed_up_to is not None and step <= self._resumed_up_to:
                self._skipped += len(values)
            elif not self._warned_late:
                self._warned_late = True
                logger.warn("WandbMonitor: {} put at global step {} after that step was sent to W&B, which "
                            "keeps one row per step: not sent (nor are later ones put that late).".format(
                                sorted(values), step))
            return
        self._report_skipped()
        self._guard('logging step {}'.format(step), lambda: self._run.log(values, step=step, commit=True))
        if not self._failed:
            self._last_step = step

    def _report_skipped(self):
        if self._skipped:
            logger.info("WandbMonitor: {} value(s) put at global steps up to {} were not sent: W&B run {} "
                        "has those steps from before it was resumed.".format(
                            self._skipped, self._resumed_up_to, self._run.id))
            self._skipped = 0

    def _trigger(self):
        self._send_pending()
        if self._run is not None:
            self._write_record()

    # ----- the end ---------------------------------------------------------------------------

    def _after_train(self):
        if self._run is None:
            return
        self._send_pending()
        self._report_skipped()
        status, why = run_outcome(self.trainer.loop)
        summary = {'status': status}
        if why is not None:
            summary['error'] = why
        self._guard('updating the summary', lambda: self._run.summary.update(summary))
        self._guard('saving stats.json and the checkpoint', self._save_results)
        try:
            self._write_record()
        except OSError as err:   # the run is finished all the same
            logger.warn("WandbMonitor: cannot write {} ({}).".format(self._record.path, err))
        code = self._exit_code(status)
        if status == KILLED:
            self._guard('marking the run as preempted', self._run.mark_preempting)
        try:
            self._run.finish(exit_code=code)
        except Exception as err:
            logger.warn("WandbMonitor: finishing W&B run {} failed ({}: {}).".format(
                self._run.id, type(err).__name__, err))

    def _exit_code(self, status):
        if status == FINISHED:
            return 0
        if status == KILLED:
            code = getattr(self.trainer.loop.failure.error, 'code', None)   # SystemExit (Preempted)
            return code if isinstance(code, int) and code != 0 else 130    # Ctrl-C: 128 + SIGINT
        return 1

    def _save_results(self):
        paths = []
        stats = stats_json.stats_path(self._logdir)
        if os.path.isfile(stats):
            paths.append(stats)
        prefix = last_checkpoint(self._logdir)
        if prefix is not None:    # else no checkpoint (or none that reads back): nothing to save
            paths += checkpoint_files(prefix)
        for path in paths:
            self._save_file(path)

    def _save_file(self, path):
        """Save ``path`` with the run, as it is now: hard-linked (or copied) into the run's files,
        so that a checkpoint ModelSaver deletes later is still there when an offline run is synced."""
        rel = os.path.relpath(path, self._logdir)
        if rel.startswith(os.pardir):
            rel = os.path.basename(path)
        target = os.path.join(self._run.dir, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if os.path.lexists(target):
            os.remove(target)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
        self._run.save(target, base_path=self._run.dir, policy='now', glob=False)
