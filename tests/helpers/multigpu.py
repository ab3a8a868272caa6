"""The multi-tower trainers on ``k`` virtual CPU devices (:func:`helpers.graphs.cpus`): sessions
with that many CPUs, and one epoch of training read back.

Example::

    trainer = SyncMultiGPUTrainerReplicated(cpus(2))
    values = train_towers(trainer, QueueInput(DataFromList(batches, shuffle=False)), 2, model, 3)
    values['fc0/W'], values['tower1/fc0/W']     # the main variable and its replica
"""

from helpers.graphs import ReadAllVariables
from tensorpack_lite.tfutils.common import get_default_sess_config
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator

__all__ = ['cpu_session_creator', 'train_towers']


def cpu_session_creator(k, soft_placement=True):
    """New sessions of the default configuration with ``k`` (virtual) CPU devices."""
    config = get_default_sess_config()
    config.device_count['CPU'] = k
    config.allow_soft_placement = soft_placement
    return NewSessionCreator(config=config)


def train_towers(trainer, source, k, model, steps, callbacks=()):
    """``trainer`` (its towers on the first ``k`` CPUs) trains ``model`` on ``source`` for one
    epoch of ``steps`` steps with ``callbacks`` and no monitors; returns every global and local
    variable at the end, by op name."""
    readback = ReadAllVariables()
    trainer.setup_graph(model.get_input_signature(), source, model.build_graph, model.get_optimizer)
    trainer.train_with_defaults(callbacks=list(callbacks) + [readback], monitors=[], extra_callbacks=[],
                                steps_per_epoch=steps, max_epoch=1, session_creator=cpu_session_creator(k))
    return readback.values
