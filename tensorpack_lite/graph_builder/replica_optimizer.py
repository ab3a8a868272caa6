"""Each replica's own optimizer state, for builders whose K towers apply the same gradients
to their own copies of the variables.

A ``tf.compat.v1.train.Optimizer`` keeps one copy per graph of its state that is not per
variable (Adam's ``beta1_power``/``beta2_power``, also when Adam is wrapped, e.g. by
``AccumGradOptimizer``): K calls of one optimizer's ``apply_gradients`` would share it and
advance it K times a step. :func:`apply_on_replicas` gives each replica an optimizer of its own:

* tower 0 applies with the optimizer itself, so its state keeps the names tensorpack gives it;
* tower k > 0 applies with a copy of the optimizer (:func:`copy_optimizer_without_state`),
  whose variables are the local variables ``tower{k}/<name of tower 0's>``, as the other
  replica variables, so that the replicated builders' post-init op copies tower 0's state
  into them.

So K towers of batch b make, step after step, the update of one tower on batch K*b.
"""

import copy
from contextlib import contextmanager

from ..compat import tf, tfv1
from .devices import local_collections

__all__ = ['copy_optimizer_without_state', 'apply_on_replicas']

# Where tf.compat.v1.train.Optimizer keeps what its apply_gradients creates (slots, non-slot
# variables, slot restorations still to do).
_STATE_ATTRIBUTES = ('_slots', '_non_slot_dict', '_deferred_slot_restorations')


def copy_optimizer_without_state(opt):
    """A copy of ``opt`` that shares its hyper-parameters (e.g. a learning-rate variable) but
    none of the state its ``apply_gradients`` creates. The optimizers it holds (the wrapped
    one of a :class:`~tensorpack_lite.tfutils.optimizer.ProxyOptimizer`...) are copied the
    same way.

    Args:
        opt (tf.compat.v1.train.Optimizer): the optimizer, before its ``apply_gradients``.
    """
    twin = copy.copy(opt)
    for name, value in vars(opt).items():
        if isinstance(value, tfv1.train.Optimizer):
            setattr(twin, name, copy_optimizer_without_state(value))
        elif name in _STATE_ATTRIBUTES:
            setattr(twin, name, {})
    return twin


@contextmanager
def _recording_variables(created):
    """Appends every variable created inside to the list ``created``."""
    def record(next_creator, **kwargs):
        var = next_creator(**kwargs)
        created.append(var)
        return var

    with tfv1.variable_creator_scope(record):
        yield


def _count_mismatch(index, count, main_variables):
    return ValueError("The optimizer of replica {} creates {} variables, tower 0's creates {} ({}): every "
                      "replica's optimizer must create the variables tower 0's does.".format(
                          index, count, len(main_variables),
                          ', '.join(v.op.name for v in main_variables) or 'none'))


def _check_same_kind(replica, main):
    if replica.dtype.base_dtype != main.dtype.base_dtype or not replica.shape.is_compatible_with(main.shape):
        raise ValueError("The replica's optimizer variable {} ({}, {}) does not match tower 0's {} ({}, "
                         "{}).".format(replica.op.name, replica.dtype.base_dtype.name, replica.shape,
                                       main.op.name, main.dtype.base_dtype.name, main.shape))


@contextmanager
def _as_replica_of(main_variables, index):
    """The variables created inside are replica ``index``'s copies of ``main_variables``, in
    the same order: local, named ``tower{index}/`` + the main one's name."""
    created = []

    def create(next_creator, **kwargs):
        if len(created) == len(main_variables):
            raise _count_mismatch(index, 'more than {}'.format(len(created)), main_variables)
        main = main_variables[len(created)]
        kwargs['name'] = 'tower{}/{}/'.format(index, main.op.name)   # the trailing '/': no other scope
        kwargs['collections'] = local_collections(kwargs.get('collections'))
        var = next_creator(**kwargs)
        created.append(var)
        _check_same_kind(var, main)
        return var

    with tfv1.variable_creator_scope(create):
        yield
    if len(created) != len(main_variables):
        raise _count_mismatch(index, len(created), main_variables)


def apply_on_replicas(opt, grad_list, devices):
    """The update ops of K replicas, each applying its (gradient, variable) pairs with an
    optimizer of its own: ``opt`` for tower 0, a copy of it (its state under ``tower{k}/``,
    local) for tower k. The ops are named ``apply_grad_{k}`` in the current name scope.

    Args:
        opt (tf.compat.v1.train.Optimizer): the optimizer, before its ``apply_gradients``.
        grad_list (list): K lists of (gradient, variable), list k of replica k's variables.
        devices (list[str]): the device of each replica.

    Returns:
        list[tf.Operation]: the update op of each replica.
    """
    replica_optimizers = [copy_optimizer_without_state(opt) for _ in grad_list[1:]]
    main_variables = []
    with tf.device(devices[0]), _recording_variables(main_variables):
        updates = [opt.apply_gradients(grad_list[0], name='apply_grad_0')]
    for index, (replica_opt, grads) in enumerate(zip(replica_optimizers, grad_list[1:]), 1):
        with tf.device(devices[index]), _as_replica_of(main_variables, index):
            updates.append(replica_opt.apply_gradients(grads, name='apply_grad_{}'.format(index)))
    return updates
