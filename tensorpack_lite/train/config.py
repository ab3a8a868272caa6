"""TrainConfig: everything a training run needs, and the default callbacks and monitors."""

from ..callbacks.base import Callback
from ..callbacks.graph import RunUpdateOps
from ..callbacks.monitor import JSONWriter, MonitorBase, ScalarPrinter, TFEventWriter
from ..callbacks.steps import ProgressBar
from ..callbacks.summary import MergeAllSummaries, MovingAverageSummary
from ..compat import tfv1
from ..dataflow.base import DataFlow
from ..input_source.input_source_base import InputSource
from ..tfutils.sesscreate import NewSessionCreator
from ..tfutils.sessinit import SessionInit
from .base import TrainLoop
from .model_desc import ModelDescBase

__all__ = ['DEFAULT_CALLBACKS', 'DEFAULT_MONITORS', 'TrainConfig']


def DEFAULT_CALLBACKS():
    """The callbacks every training gets unless told otherwise: moving-average summaries,
    a progress bar, summaries merged at each epoch's end, and the UPDATE_OPS run each step
    (each does nothing when there is nothing for it)."""
    return [MovingAverageSummary(), ProgressBar(), MergeAllSummaries(), RunUpdateOps()]


def DEFAULT_MONITORS():
    """The monitors every training gets unless told otherwise: TensorBoard event files,
    stats.json and a table of scalars printed after each epoch (the first two only when a
    logger directory is set)."""
    return [TFEventWriter(), JSONWriter(), ScalarPrinter()]


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

    Example::

        config = TrainConfig(model=Model(), dataflow=BatchData(df, 64),
                             callbacks=[ModelSaver()], max_epoch=10)
        launch_train_with_config(config, SimpleTrainer())
    """

    def __init__(self, dataflow=None, data=None, model=None, callbacks=None, extra_callbacks=None,
                 monitors=None, session_creator=None, session_config=None, session_init=None,
                 starting_epoch=1, steps_per_epoch=None, max_epoch=99999):
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
        if steps_per_epoch is None:
            steps_per_epoch = self._input_size()
        TrainLoop.check_schedule(steps_per_epoch, starting_epoch, max_epoch)
        self.steps_per_epoch = int(steps_per_epoch)
        self.starting_epoch = int(starting_epoch)
        self.max_epoch = int(max_epoch)

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
