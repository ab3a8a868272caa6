"""TrainConfig: everything a training run needs; AutoResumeTrainConfig: the same, continuing
the run found in the logger directory. (DEFAULT_CALLBACKS and DEFAULT_MONITORS live in
:mod:`.defaults` and are importable from here too, as in tensorpack.)"""

import os

from ..callbacks.monitor import MonitorBase
from ..checkpoint.resume_point import ResumeSearch
from ..compat import tfv1
from ..dataflow.base import DataFlow
from ..graph_builder.model_desc import ModelDescBase
from ..input_source.input_source_base import InputSource
from ..loop.callback import Callback
from ..loop.state import Schedule
from ..precision.mixed_precision import MixedPrecision
from ..tfutils.sesscreate import NewSessionCreator
from ..tfutils.sessinit import SaverRestore, SessionInit
from ..utils import logger
from ..utils.argtools import is_int
from .defaults import DEFAULT_CALLBACKS, DEFAULT_MONITORS
from .elastic import ElasticPolicy, NoAdjustment

__all__ = ['DEFAULT_CALLBACKS', 'DEFAULT_MONITORS', 'TrainConfig', 'AutoResumeTrainConfig']


def _check_list_of(value, kind, name):
    if value is None:
        return None
    if not isinstance(value, list):
        raise TypeError("TrainConfig({}=...) must be a list, got {}".format(name, type(value).__name__))
    for index, item in enumerate(value):
        if not isinstance(item, kind):
            raise TypeError("TrainConfig: {}[{}] must be a {}, got {!r} of type {}".format(
                name, index, kind.__name__, item, type(item).__name__))
    return value


def _schedule_property(name):
    """A TrainConfig attribute kept in its schedule; setting it checks the new schedule."""
    def set_value(config, value):
        values = dict(steps_per_epoch=config.steps_per_epoch, starting_epoch=config.starting_epoch,
                      max_epoch=config.max_epoch)
        values[name] = value
        config.schedule = Schedule(**values)
    return property(lambda config: getattr(config.schedule, name), set_value)


class TrainConfig:
    """The arguments of a training run, checked when the config is made.

    Args:
        dataflow (DataFlow): the training data; or
        data (InputSource): the training input (exactly one of the two).
        model (ModelDesc): the model.
        callbacks (list[Callback]): callbacks of this run.
        extra_callbacks (list[Callback]): appended to ``callbacks``; defaults to
            ``DEFAULT_CALLBACKS()``.
        monitors (list[MonitorBase]): defaults to ``DEFAULT_MONITORS()``.
        session_creator (tf.compat.v1.train.SessionCreator): defaults to NewSessionCreator.
        session_config (tf.compat.v1.ConfigProto): config of the default session creator.
        session_init (SessionInit): how variables are initialized (e.g. from a checkpoint).
        starting_epoch (int): the number of the first epoch (1 for a new run).
        steps_per_epoch (int): defaults to the size of the dataflow or InputSource.
        max_epoch (int): the number of the last epoch.
        mixed_precision (str or MixedPrecision): None (float32), 'bf16' or 'fp16': set on the
            trainer by :func:`launch_train_with_config` (see docs/mixed_precision.md).
        elastic (ElasticPolicy): what a run resumed with another world size changes
            (:mod:`~tensorpack_lite.train.elastic`): :class:`NoAdjustment` (the default),
            :class:`KeepGlobalBatch` or :class:`ScaleLearningRate`.
        accumulate (int): K >= 1, the micro-batches of one update, set on the trainer by
            :func:`launch_train_with_config` (``trainer.accumulate``): each step runs one batch
            of the input, every K-th step applies the mean gradient of the last K, reduced once
            across towers and processes (see docs/trainer.md "Gradient accumulation").

    Example::

        config = TrainConfig(model=Model(), dataflow=BatchData(df, 64),
                             callbacks=[ModelSaver()], max_epoch=10)
        launch_train_with_config(config, SimpleTrainer())
    """

    def __init__(self, dataflow=None, data=None, model=None, callbacks=None, extra_callbacks=None,
                 monitors=None, session_creator=None, session_config=None, session_init=None,
                 starting_epoch=1, steps_per_epoch=None, max_epoch=99999, mixed_precision=None,
                 elastic=None, accumulate=1):
        if dataflow is not None and data is not None:
            raise ValueError("TrainConfig takes either dataflow= or data=, not both")
        if dataflow is not None and not isinstance(dataflow, DataFlow):
            raise TypeError("TrainConfig(dataflow=...) must be a DataFlow, got {}".format(
                type(dataflow).__name__))
        if data is not None and not isinstance(data, InputSource):
            raise TypeError("TrainConfig(data=...) must be an InputSource, got {}".format(
                type(data).__name__))
        if model is not None and not isinstance(model, ModelDescBase):
            raise TypeError("TrainConfig(model=...) must be a ModelDesc, got {}".format(type(model).__name__))
        if session_init is not None and not isinstance(session_init, SessionInit):
            raise TypeError("TrainConfig(session_init=...) must be a SessionInit, got {}".format(
                type(session_init).__name__))
        if session_creator is not None and session_config is not None:
            raise ValueError("TrainConfig takes session_creator= or session_config=, not both")
        if session_creator is not None and not isinstance(session_creator, tfv1.train.SessionCreator):
            raise TypeError("TrainConfig(session_creator=...) must be a SessionCreator, got {}".format(
                type(session_creator).__name__))
        self.dataflow = dataflow
        self.data = data
        self.model = model
        self.callbacks = _check_list_of(callbacks, Callback, 'callbacks')
        self.extra_callbacks = _check_list_of(extra_callbacks, Callback, 'extra_callbacks')
        self.monitors = _check_list_of(monitors, MonitorBase, 'monitors')
        self.session_creator = session_creator or NewSessionCreator(config=session_config)
        self.session_init = session_init
        if elastic is not None and not isinstance(elastic, ElasticPolicy):
            raise TypeError("TrainConfig(elastic=...) must be an ElasticPolicy (NoAdjustment(), "
                            "KeepGlobalBatch(global_batch), ScaleLearningRate(reference_world_size)), "
                            "got {!r}".format(elastic))
        self.elastic = elastic if elastic is not None else NoAdjustment()
        self.resumed_run = None
        """The :class:`~tensorpack_lite.checkpoint.resume_point.RunShape` of the epoch this config
        resumes from, as ``stats.json`` recorded it (set by :class:`AutoResumeTrainConfig`; None:
        not resuming)."""
        self.resume_state = None
        """The :class:`~tensorpack_lite.checkpoint.resume_state.ResumeState` of the checkpoint this config
        resumes from, when it has one (set by :class:`AutoResumeTrainConfig`): the trainer starts
        at its step and the callbacks take back their states."""
        self.mixed_precision = MixedPrecision.of(mixed_precision)
        if not is_int(accumulate) or accumulate < 1:
            raise ValueError("TrainConfig(accumulate=...) is the number of micro-batches per update, an int "
                             ">= 1; got {!r}".format(accumulate))
        self.accumulate = int(accumulate)
        if steps_per_epoch is None:
            steps_per_epoch = self._input_size()
        self.schedule = Schedule(steps_per_epoch, starting_epoch, max_epoch)
        """The :class:`Schedule` of the run (``steps_per_epoch``, ``starting_epoch``, ``max_epoch``)."""

    steps_per_epoch = _schedule_property('steps_per_epoch')
    starting_epoch = _schedule_property('starting_epoch')
    max_epoch = _schedule_property('max_epoch')

    def parameters(self):
        """The settings of the run this config describes, as a flat dict of names to strings and
        numbers: what an experiment tracker records as the run's parameters (see
        :func:`~tensorpack_lite.callbacks.tracking.run_parameters`). Where the run starts
        (``starting_epoch``) is not one of them: a resumed run is the same run.

        Example::

            TrainConfig(model=Model(), dataflow=df, max_epoch=5).parameters()
            # {'model': 'Model', 'input': 'BatchData', 'steps_per_epoch': 100, 'max_epoch': 5, ...}
        """
        source = self.dataflow if self.dataflow is not None else self.data
        named = {'model': self.model, 'input': source, 'session_init': self.session_init}
        params = {key: type(value).__name__ for key, value in named.items() if value is not None}
        callbacks = (self.callbacks or []) + (self.extra_callbacks or [])
        params.update(steps_per_epoch=self.steps_per_epoch, max_epoch=self.max_epoch,
                      callbacks=', '.join(str(cb) for cb in callbacks), elastic=type(self.elastic).__name__)
        if self.mixed_precision is not None:
            params['mixed_precision'] = self.mixed_precision.mode
        if self.accumulate > 1:
            params['accumulate'] = self.accumulate
        return params

    def _input_size(self):
        source = self.dataflow if self.dataflow is not None else self.data
        try:
            if self.dataflow is not None:
                return len(self.dataflow)
            if self.data is not None:
                return self.data.size()
        except NotImplementedError:
            pass
        raise ValueError("TrainConfig needs steps_per_epoch: the size of {} is not known".format(
            type(source).__name__ if source is not None else 'the input (none was given)'))

    def restart_epoch(self, reason):
        """Resume at the end of the last finished epoch instead of a checkpoint in the middle of
        the next one, because of ``reason`` (e.g. the run now has another number of replicas, so
        that epoch's data would be dealt differently). A TrainConfig resumes nothing, so there
        is nothing to do: :class:`AutoResumeTrainConfig` does it."""


class AutoResumeTrainConfig(TrainConfig):
    """A TrainConfig that continues the run found in the logger directory, if any, at the step
    of its newest complete checkpoint.

    A checkpoint is a resume point when its files read back, and either its resume state
    (``<prefix>.resume``, written by :class:`ModelSaver` between two steps: the loop's position,
    the data position, the callbacks' states) puts it in the middle of an epoch whose previous
    epochs ``stats.json`` records, or it was saved at the end of an epoch ``k`` that
    ``stats.json`` records at that global step (see
    :func:`~tensorpack_lite.utils.stats_json.finished_epochs`; the record also says the size of
    the run, ``resumed_run``, which ``TrainConfig(elastic=...)`` acts on). The newest one is
    taken: the trainer starts at its step (``resume_state``), the callbacks take their states
    back (the input source its DataFlow's position), the global step, the hyper-parameter
    setters and the statistics history continue, and no step runs twice. One line says where
    (``Resuming from checkpoint .../model-45 (step 15 of 30 of epoch 2, global step 45).``).

    Checkpoints are found by their own files (``<name>-<step>.index``) as well
    as through the ``checkpoint`` state file, so a state file that is missing, unreadable or
    names files that are gone costs nothing. From the newest candidate down, each is read back
    whole (:func:`~tensorpack_lite.checkpoint.verify.verify_checkpoint`: index, shard sizes,
    every tensor with its checksum); one that does not is skipped and its files are renamed
    to ``<prefix>.damaged.*`` (kept, never deleted). One warning says what was passed over
    and where the run goes on from.

    So a run resumes by itself whatever interrupted it: checkpoints saved while a step failed
    (no resume state), a checkpoint at an epoch's end that a kill left unrecorded, one whose
    write was cut between its index and its resume state (neither a resume state nor listed in
    the state file, in a run whose checkpoints have them: see
    :class:`~tensorpack_lite.checkpoint.resume_point.ResumeSearch`) and records of epochs whose
    checkpoint could not be written are passed over; :class:`JSONWriter` then moves
    the records after the resume point to a backup file. When ``stats.json`` exists but
    describes nothing that has a checkpoint, the run starts from scratch; when there is no
    ``stats.json`` at all (a run without JSONWriter), the newest checkpoint with a resume state
    or at an epoch's end is trusted.

    Args:
        always_resume (bool): when False, an explicit ``session_init`` or ``starting_epoch``
            given by the caller wins over what is found.
        kwargs: as for :class:`TrainConfig`.

    Example::

        logger.set_logger_dir('train_log/run1', action='k')   # keep: we want to resume
        config = AutoResumeTrainConfig(model=Model(), dataflow=df,
                                       callbacks=[ModelSaver()], max_epoch=100)
    """

    def __init__(self, always_resume=True, **kwargs):
        super().__init__(**kwargs)
        directory = logger.get_logger_dir()
        search = ResumeSearch(directory, self.steps_per_epoch)
        search.set_broken_aside()
        search.report()
        self._epoch_end_point = search.epoch_end_point
        self._epoch_end_shape = search.epoch_end_shape
        if search.point is None:
            return
        self._resume_at(search.point, always_resume or kwargs.get('session_init') is None,
                        always_resume or 'starting_epoch' not in kwargs)
        self.resumed_run = search.shape

    def _resume_at(self, point, restore, set_epoch):
        path, last_epoch, state = point
        mid_epoch = state is not None and not state.at_epoch_end
        if restore:
            logger.info("Resuming from checkpoint {} ({}).".format(
                path, "{}, global step {}".format(state.describe(), state.global_step) if mid_epoch
                else "end of epoch {}".format(last_epoch)))
            self.session_init = SaverRestore(path)
            self.resume_state = state
        if set_epoch:
            if last_epoch >= self.max_epoch and not mid_epoch:
                raise ValueError("The run in {} already finished its last epoch ({} >= max_epoch={}): "
                                 "nothing to resume. Raise max_epoch to train further.".format(
                                     logger.get_logger_dir(), last_epoch, self.max_epoch))
            self.starting_epoch = last_epoch if mid_epoch else last_epoch + 1
            logger.info("Setting starting_epoch to {}{}.".format(
                self.starting_epoch, " (from step {} of it)".format(state.steps_done) if mid_epoch else ""))

    def restart_epoch(self, reason):
        """Go back to the newest resumable end of an epoch when the resume point is in the
        middle of one; one warning says so, with ``reason`` and the steps trained again."""
        state = self.resume_state
        if state is None or state.at_epoch_end:
            return
        if self._epoch_end_point is None:
            logger.warn("Not resuming at {} of the run: {}; no checkpoint at an epoch's end to go back "
                        "to: starting from scratch.".format(state.describe(), reason))
            self.session_init, self.resume_state, self.starting_epoch = None, None, 1
            return
        path, epoch, _ = self._epoch_end_point
        logger.warn("Not resuming at {} of the run: {}; restarting epoch {} from {} (the end of epoch {}), "
                    "{} steps are trained again.".format(
                        state.describe(), reason, epoch + 1, os.path.basename(path), epoch, state.steps_done))
        self._resume_at(self._epoch_end_point, True, True)
        self.resumed_run = self._epoch_end_shape

    @staticmethod
    def find_resume_point(directory, steps_per_epoch):
        """The :class:`~tensorpack_lite.checkpoint.resume_point.ResumePoint` ``(path, epoch, state)``
        of the run in ``directory``, or None when there is nothing to resume (see the class doc for
        the rule). Checkpoints that do not read back are passed over (one warning) but left as
        they are. Raises ValueError
        when there is no ``stats.json`` and no checkpoint at the end of an epoch, or when
        ``stats.json`` cannot be read."""
        search = ResumeSearch(directory, steps_per_epoch)
        search.report()
        return search.point
