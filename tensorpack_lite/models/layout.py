"""Where channels-first (NCHW) kernels run, and how a layer runs one where they do not.

TensorFlow's generic CPU kernels of convolution, transposed convolution and pooling take only
NHWC inputs; its GPU kernels take both (``bias_add``, fused batch norm and the reductions take
both everywhere). A layer given ``data_format='channels_first'`` passes such a kernel to
:func:`call_in_data_format`, which asks :func:`nchw_strategy` about the device the layer's ops
are placed on: ``'native'`` (a GPU) calls the kernel in NCHW, ``'transpose'`` (a CPU) calls it
in NHWC between two transposes. Variables, output names and output shapes are the same either
way.
"""

from ..compat import tf
from ..utils.gpu import num_tensorflow_gpus
from .tflayer import get_data_format

__all__ = ['NATIVE', 'TRANSPOSE', 'current_device', 'process_has_gpu', 'nchw_strategy',
           'call_in_data_format']

NATIVE = 'native'
"""The device runs NCHW kernels: no transpose."""
TRANSPOSE = 'transpose'
"""The device (a CPU) runs NHWC kernels only: transpose around them."""

_NCHW_TO_NHWC = [0, 2, 3, 1]
_NHWC_TO_NCHW = [0, 3, 1, 2]


def current_device():
    """The device string an op created here in the default graph gets from the enclosing
    device scopes and device functions ('' when none sets one). It is read from a ``NoOp``
    (named ``device_probe``, never run) built at this point."""
    if tf.executing_eagerly():
        return ''
    return tf.no_op(name='device_probe').device


def process_has_gpu():
    """Whether TensorFlow sees a GPU in this process."""
    return num_tensorflow_gpus() > 0


def nchw_strategy(device=None):
    """:data:`NATIVE` or :data:`TRANSPOSE`: how an NCHW kernel of a layer runs on ``device``.

    A CPU device means :data:`TRANSPOSE`. Any other device (a GPU, or no device type: TensorFlow
    then picks a GPU when there is one) means :data:`NATIVE` when the process has a GPU, else
    :data:`TRANSPOSE`: without a GPU, soft placement puts a GPU tower's ops on the CPU (as
    ``SyncMultiGPUTrainerReplicated(max(get_num_gpu(), 1))`` does on a machine without GPU).

    Args:
        device (str): a device string ('/gpu:0', '/job:worker/task:1/device:CPU:0'...); None
            means :func:`current_device` (asked only when the process has a GPU).
    """
    if not process_has_gpu():
        return TRANSPOSE
    if device is None:
        device = current_device()
    device_type = tf.DeviceSpec.from_string(device).device_type or ''
    return TRANSPOSE if device_type.upper() == 'CPU' else NATIVE


def call_in_data_format(kernel, x, data_format):
    """``kernel(x, data_format)`` for a 4-D ``x`` in ``data_format``, computed where the
    current device can compute it.

    Args:
        kernel: a function ``(inputs, data_format) -> 4-D tensor`` that builds its ops for
            ``data_format`` 'NHWC' or 'NCHW'; its result is in the same format as its input.
        x (tf.Tensor): the input, in ``data_format``.
        data_format (str): 'NHWC'/'channels_last' or 'NCHW'/'channels_first'.

    Returns:
        The kernel's result, in ``data_format``. With NCHW and :data:`TRANSPOSE`, the kernel
        gets ``x`` transposed to NHWC (op ``to_nhwc``) and its result is transposed back (op
        ``to_nchw``): two transposes of activations per call, and two more of their
        gradients in training.
    """
    data_format = get_data_format(data_format, keras_mode=False)
    if data_format == 'NHWC' or nchw_strategy() == NATIVE:
        return kernel(x, data_format)
    nhwc = tf.transpose(x, _NCHW_TO_NHWC, name='to_nhwc')
    return tf.transpose(kernel(nhwc, 'NHWC'), _NHWC_TO_NCHW, name='to_nchw')
