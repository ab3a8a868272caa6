"""Inference towers: the one way to build a model for inference, on placeholders made for its
input signature or on given tensors (used by trainers, predictors, inference runners and the
exporter).

Example::

    handle = build_predict_tower(tower_func)          # placeholders, tower '' on this device
    prob = handle['prob']
"""

import contextlib

from ..compat import tf, tfv1
from ..utils import logger
from ..utils.gpu import get_num_gpu
from .tower_context import PredictTowerContext

__all__ = ['build_or_reuse_placeholder', 'build_predict_tower']


def build_or_reuse_placeholder(tensor_spec):
    """A placeholder for ``tensor_spec`` in the default graph: the existing one when a
    placeholder of that name, dtype and a compatible shape exists, else a new one at the
    root name scope. A same-named tensor that does not match is a clear error."""
    graph = tfv1.get_default_graph()
    name = tensor_spec.name
    try:
        existing = graph.get_tensor_by_name(name + ':0')
    except KeyError:
        existing = None
    if existing is not None:
        if ('Placeholder' not in existing.op.type or existing.dtype != tensor_spec.dtype
                or not existing.shape.is_compatible_with(tensor_spec.shape)):
            raise ValueError("Input '{}' ({} {}) clashes with tensor {} ({} {}) already in the "
                             "graph".format(name, tensor_spec.dtype.name, tensor_spec.shape,
                                            existing.name, existing.dtype.name, existing.shape))
        return existing
    with tfv1.name_scope(None):
        return tfv1.placeholder(tensor_spec.dtype, shape=tensor_spec.shape, name=name)


def _device_name(device):
    if device is None or isinstance(device, str):
        return device
    if device >= 0 and get_num_gpu() > 0:
        return '/gpu:{}'.format(device)
    return '/cpu:0'  # also for a GPU id on a machine without GPUs


def build_predict_tower(tower_func, inputs=None, tower_name='', device=None, vs_name='', reuse=True):
    """Call ``tower_func`` as an inference tower (under a :class:`PredictTowerContext`) and
    return its :class:`TowerTensorHandle`.

    Args:
        tower_func (TowerFunc): the model.
        inputs (list[tf.Tensor]): one tensor per input; by default the placeholders of
            ``tower_func``'s input signature (existing ones of the same name are reused).
        tower_name (str): the tower's name scope; a named tower is built at the root name
            scope, ``''`` where the caller is.
        device: a GPU id (-1, or any id where there is no GPU: the CPU), a device string
            such as ``'/cpu:1'``, or None for the device in effect.
        vs_name (str): the variable scope the tower reads its variables from.
        reuse (bool): reuse existing variables (a tower beside training towers); False or
            None: the tower may create them (a model built for inference only).

    Example::

        handle = build_predict_tower(trainer.tower_func, tower_name='tower-pred-0', device=0)
        handle['prob']
    """
    if inputs is None:
        inputs = [build_or_reuse_placeholder(spec) for spec in tower_func.input_signature]
    device_name = _device_name(device)
    with contextlib.ExitStack() as stack:
        if tower_name:
            logger.info("Building inference tower '{}'{}{} ...".format(
                tower_name, " on device {}".format(device_name) if device_name else '',
                " with variable scope '{}'".format(vs_name) if vs_name else ''))
            stack.enter_context(tfv1.name_scope(None))
        if reuse:
            stack.enter_context(tfv1.variable_scope(tfv1.get_variable_scope(), reuse=True))
        if device_name is not None:
            stack.enter_context(tf.device(device_name))
        stack.enter_context(PredictTowerContext(tower_name, vs_name=vs_name))
        tower_func(*inputs)
    return tower_func.towers[-1]
