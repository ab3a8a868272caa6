"""launch_train_with_config: train a ModelDesc with a TrainConfig on a given trainer."""

from ..dataflow.shards.share import deal_shares, position_fits_any_world
from ..input_source.input_source import FeedInput, QueueInput, StagingInput
from ..input_source.input_source_base import InputSource
from ..utils import logger
from .config import TrainConfig
from .tower import SingleCostTrainer
from .trainers import SimpleTrainer

__all__ = ['apply_default_prefetch', 'launch_train_with_config']


def apply_default_prefetch(input_source_or_dataflow, trainer):
    """The InputSource a trainer uses for a DataFlow: FeedInput for SimpleTrainer,
    QueueInput for the others; with several towers, a QueueInput is also staged onto them.
    An InputSource is kept as it is (apart from staging)."""
    if isinstance(input_source_or_dataflow, InputSource):
        source = input_source_or_dataflow
    elif type(trainer) is SimpleTrainer:
        source = FeedInput(input_source_or_dataflow)
    else:
        logger.info("Automatically applying QueueInput on the DataFlow.")
        source = QueueInput(input_source_or_dataflow)
    devices = getattr(trainer, 'devices', None)
    if devices and len(devices) > 1 and isinstance(source, QueueInput):
        logger.info("Automatically applying StagingInput on the QueueInput.")
        source = StagingInput(source)
    return source


def _deal_shards(config, trainer):
    """Give the ShardedData of ``config.dataflow`` made without a share that of this process of
    a multi-process trainer (a single process keeps the whole); say whether the DataFlow's
    position holds for any number of processes (``trainer.position_fits_any_world``)."""
    protocol = getattr(trainer, 'protocol', None)
    if config.dataflow is None:
        return
    if protocol is not None:
        deal_shares(config.dataflow, protocol.index, protocol.size)
    trainer.position_fits_any_world = position_fits_any_world(config.dataflow)


def _restart_epoch_if_resized(config, trainer):
    """A run resumed with another number of model replicas than its resume state's: the data
    positions saved were dealt to the old replicas, so they are not restored (the epoch's data
    starts anew, as in tensorpack), and a resume point in the middle of an epoch goes back to
    that epoch's start (see docs/distributed.md, "Elastic training"). But a position that holds
    for any number of processes (a ShardedData's) with a policy that keeps the global batch
    (and so the steps per epoch and what a step consumes) is kept: the run goes on at its step."""
    state = config.resume_state
    if state is None or state.world_size == trainer.world_size:
        return
    reason = "it was saved by {} model replicas (towers x processes) and this run has {}".format(
        state.world_size, trainer.world_size)
    if trainer.position_fits_any_world and config.elastic.keeps_global_batch:
        logger.info("The resume state of the run is restored although {}: its data position holds for any "
                    "number of processes (ShardedData) and {!r} keeps the global batch.".format(
                        reason, config.elastic))
        return
    if not state.at_epoch_end:
        config.restart_epoch(reason)
    logger.info("The resume state of the run is not restored ({}): the epoch's data starts anew.".format(
        reason))
    config.resume_state = None


def launch_train_with_config(config, trainer):
    """Build ``config.model`` on ``trainer`` with ``config``'s input, then train with the
    rest of ``config``.

    Example::

        launch_train_with_config(TrainConfig(model=Model(), dataflow=df, max_epoch=5),
                                 SimpleTrainer())
    """
    if not isinstance(trainer, SingleCostTrainer):
        raise TypeError("launch_train_with_config() needs a SingleCostTrainer (e.g. SimpleTrainer()), "
                        "got {!r}; subclass Trainer and call train_with_defaults() otherwise".format(trainer))
    if not isinstance(config, TrainConfig):
        raise TypeError("launch_train_with_config() needs a TrainConfig, got {!r}".format(config))
    if config.model is None:
        raise ValueError("TrainConfig.model is required by launch_train_with_config()")
    if config.dataflow is None and config.data is None:
        raise ValueError("TrainConfig needs dataflow= or data= for launch_train_with_config()")
    model = config.model
    trainer.config_parameters = config.parameters()
    if config.mixed_precision is not None:
        trainer.mixed_precision = config.mixed_precision
    trainer.accumulate = config.accumulate
    _deal_shards(config, trainer)
    _restart_epoch_if_resized(config, trainer)
    config.elastic.apply(config, trainer)
    source = apply_default_prefetch(config.data if config.data is not None else config.dataflow, trainer)
    trainer.setup_graph(model.get_input_signature(), source, model.build_graph,
                        config.elastic.optimizer_func(model.get_optimizer, trainer))
    trainer.train_with_defaults(
        callbacks=(config.callbacks or []) + config.elastic.callbacks(trainer), monitors=config.monitors,
        session_creator=config.session_creator, session_init=config.session_init,
        steps_per_epoch=config.steps_per_epoch, starting_epoch=config.starting_epoch,
        max_epoch=config.max_epoch, extra_callbacks=config.extra_callbacks,
        resume_state=config.resume_state)
