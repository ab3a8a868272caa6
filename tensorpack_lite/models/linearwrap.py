"""LinearWrap: build a chain of one-input, one-output layers fluently."""

from types import ModuleType

from ..compat import tfv1
from .registry import get_registered_layer

__all__ = ['LinearWrap']


class _ModuleFunctions(object):
    """``LinearWrap(x).tf.nn.relu()``: a function of a TensorFlow module applied to the
    wrapped tensor (submodules are followed)."""

    def __init__(self, module, tensor):
        self._module = module
        self._tensor = tensor

    def __getattr__(self, name):
        if name.startswith('__'):
            raise AttributeError(name)
        attr = getattr(self._module, name)
        if isinstance(attr, ModuleType):
            return _ModuleFunctions(attr, self._tensor)
        if not callable(attr):
            raise AttributeError("LinearWrap: '{}.{}' is not a function.".format(self._module.__name__, name))

        def apply(*args, **kwargs):
            return LinearWrap(attr(self._tensor, *args, **kwargs))
        return apply


class LinearWrap(object):
    """Wraps a tensor; every registered layer is a method that applies it and wraps the
    result, so that a chain reads top to bottom. ``()`` gives the tensor back.

    * ``.Layer('name', *args, **kwargs)``: ``Layer('name', tensor, *args, **kwargs)``; layers
      whose name is optional (``use_scope=None``) may omit it.
    * ``.apply(func, *args)``: ``func(tensor, *args)``; ``.apply2(func, a, *args)``:
      ``func(a, tensor, *args)``.
    * ``.tf.<module>.<function>(*args)``: a ``tf.compat.v1`` function applied to the tensor.
    * ``.print_tensor()``: prints the tensor, returns the same wrapper.

    Example::

        logits = (LinearWrap(image)
                  .Conv2D('conv0', 32, 3, activation=tf.nn.relu)
                  .MaxPooling('pool0', 2)
                  .FullyConnected('fc0', 512, activation=tf.nn.relu)
                  .Dropout('drop', rate=0.5)
                  .FullyConnected('linear', 10)())
    """

    def __init__(self, tensor):
        self._t = tensor

    def __getattr__(self, layer_name):
        if layer_name.startswith('__'):
            raise AttributeError(layer_name)
        if layer_name == 'tf':
            return _ModuleFunctions(tfv1, self._t)
        layer = get_registered_layer(layer_name)
        if layer is None:
            raise AttributeError(
                "LinearWrap has no layer '{}': it is neither a registered layer nor 'tf'. (Did you forget to "
                "take the tensor out with () before using it?)".format(layer_name))
        if layer.use_scope:
            def layer_func(name, *args, **kwargs):
                return LinearWrap(layer(name, self._t, *args, **kwargs))
        else:
            def layer_func(*args, **kwargs):
                if args and isinstance(args[0], str):
                    return LinearWrap(layer(args[0], self._t, *args[1:], **kwargs))
                return LinearWrap(layer(self._t, *args, **kwargs))
        return layer_func

    def apply(self, func, *args, **kwargs):
        """``LinearWrap(func(tensor, *args, **kwargs))``."""
        return LinearWrap(func(self._t, *args, **kwargs))

    def apply2(self, func, *args, **kwargs):
        """``LinearWrap(func(args[0], tensor, *args[1:], **kwargs))``: for functions taking a
        name first, as layers do."""
        if not args:
            raise TypeError("LinearWrap.apply2(func, first_arg, ...) needs the argument that goes before "
                            "the tensor.")
        return LinearWrap(func(args[0], self._t, *args[1:], **kwargs))

    def __call__(self):
        """The wrapped tensor."""
        return self._t

    def tensor(self):
        """The wrapped tensor (same as calling the wrapper)."""
        return self._t

    def print_tensor(self):
        """Print the wrapped tensor (e.g. to learn its name) and return ``self``."""
        print(self._t)
        return self
