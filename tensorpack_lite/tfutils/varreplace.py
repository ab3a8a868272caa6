"""Change what ``tf.compat.v1.get_variable`` returns inside a block of code.

All three helpers are context managers built on a *custom getter*: a function
``getter_fn(getter, *args, **kwargs)`` that TensorFlow calls instead of creating (or reusing)
a variable directly; it calls ``getter(*args, **kwargs)`` to get the real variable and may
change the arguments before, or the result after. They only see variables obtained through
``get_variable`` inside the block; a variable read by name or from a collection is untouched.

Example::

    from tensorpack_lite.tfutils import varreplace

    with varreplace.remap_variables(lambda v: tf.sign(v)):       # binary weights
        logits = tf.matmul(x, tf.compat.v1.get_variable('W', [10, 2]))

    with varreplace.freeze_variables(stop_gradient=False, skip_collection=True):
        feature = backbone(image)     # its variables are not trained
"""

from contextlib import contextmanager

from ..compat import tf, tfv1
from ..utils import logger

__all__ = ['custom_getter_scope', 'remap_variables', 'freeze_variables']


@contextmanager
def custom_getter_scope(custom_getter):
    """Re-enter the current variable scope with ``custom_getter`` added to it.

    The name scope is left as it is: ops created inside are named exactly as they would be
    outside. A custom getter already set on the current scope is kept, and called by
    TensorFlow around the new one.

    Args:
        custom_getter (callable): ``custom_getter(getter, *args, **kwargs)``, as in
            ``tf.compat.v1.get_variable``.

    Yields:
        the variable scope in effect inside the block.
    """
    if not callable(custom_getter):
        raise TypeError("custom_getter_scope() needs a callable custom_getter, got {!r}".format(
            custom_getter))
    scope = tfv1.get_variable_scope()
    with tfv1.variable_scope(scope, custom_getter=custom_getter,
                             auxiliary_name_scope=False) as new_scope:
        yield new_scope


def remap_variables(fn):
    """Replace each variable obtained with ``get_variable`` inside the block by ``fn(var)``.

    The variable itself is created (or reused) as usual; code inside the block receives
    whatever ``fn`` returns, typically a tensor computed from it.

    Args:
        fn (callable): ``tf.Variable -> tf.Tensor``.

    Returns:
        a context manager, see :func:`custom_getter_scope`.

    Example::

        with remap_variables(lambda var: quantize(var, bits=2)):
            y = tf.matmul(x, tf.compat.v1.get_variable('W', [4, 4]))   # uses quantized W
    """
    if not callable(fn):
        raise TypeError("remap_variables() needs a callable, got {!r}".format(fn))

    def remapping_getter(getter, *args, **kwargs):
        return fn(getter(*args, **kwargs))

    return custom_getter_scope(remapping_getter)


def _add_once_to_collection(key, var):
    collection = tfv1.get_collection_ref(key)
    if not any(item is var for item in collection):
        collection.append(var)


def freeze_variables(stop_gradient=True, skip_collection=False):
    """Keep the variables obtained with ``get_variable`` inside the block from being trained.

    Args:
        stop_gradient (bool): hand out ``tf.stop_gradient(var)`` (a tensor, no longer a
            ``tf.Variable``) instead of the variable, so no gradient flows to it *through the
            code inside the block*. It may still get gradients through other uses, e.g. a
            weight decay that finds it in a collection.
        skip_collection (bool): create the variables with ``trainable=False``, so they are
            not in ``TRAINABLE_VARIABLES`` (and not trained by the single-cost trainers);
            they are put in ``MODEL_VARIABLES`` instead, to be saved with the model. This
            only has an effect the first time a variable is created.

    Variables explicitly asked for with ``trainable=False`` are handed out unchanged.

    Returns:
        a context manager, see :func:`custom_getter_scope`.

    Example::

        with freeze_variables(stop_gradient=False, skip_collection=True):
            feature = pretrained_backbone(image)
    """
    def freezing_getter(getter, *args, **kwargs):
        trainable = kwargs.get('trainable')
        was_trainable = trainable is None or bool(trainable)
        if skip_collection:
            kwargs['trainable'] = False
        var = getter(*args, **kwargs)
        if not was_trainable:
            return var
        if skip_collection:
            if isinstance(var, tf.Variable):
                _add_once_to_collection(tfv1.GraphKeys.MODEL_VARIABLES, var)
            else:
                logger.warning(
                    "freeze_variables(): another custom getter returned {!r} instead of a "
                    "variable; the variable is frozen only if that getter respects "
                    "trainable=False.".format(var))
        if stop_gradient:
            name = args[0] if args else kwargs.get('name', 'variable')
            var = tf.stop_gradient(var, name='frozen_' + name.replace('/', '_'))
        return var

    return custom_getter_scope(freezing_getter)
