"""Where channels-first (NCHW) kernels run, and how a layer runs one where they do not.

TensorFlow's GPU kernels of convolution, transposed convolution and pooling take NCHW, and so
do its oneDNN CPU kernels (on by default on x86 Linux) in float32; its generic CPU kernels
(``TF_ENABLE_ONEDNN_OPTS=0``, other processors, float16) take only NHWC (``bias_add``, fused
batch norm and the reductions take both everywhere). A layer given
``data_format='channels_first'`` passes such a kernel to :func:`call_in_data_format`, which asks
:func:`nchw_strategy` about the device the layer's ops are placed on and their dtype:
``'native'`` calls the kernel in NCHW, ``'transpose'`` calls it in NHWC between two transposes.
Variables, output names and output shapes are the same either way.
"""

import functools
import platform

from ..compat import tf, tf_internal
from ..precision.mixed_precision import float16_rewrite_expected
from ..utils.gpu import num_tensorflow_gpus
from .tflayer import get_data_format

__all__ = ['NATIVE', 'TRANSPOSE', 'current_device', 'process_has_gpu', 'onednn_enabled', 'cpu_runs_nchw',
           'nchw_strategy', 'call_in_data_format']

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


@functools.lru_cache(maxsize=None)
def onednn_enabled():
    """Whether this process's TensorFlow runs its oneDNN CPU kernels (read once: TensorFlow reads
    ``TF_ENABLE_ONEDNN_OPTS`` when it starts)."""
    return bool(tf_internal('python.util._pywrap_util_port').IsMklEnabled())


def cpu_runs_nchw(dtype=tf.float32, graph=None):
    """Whether the CPU's kernels of convolution, transposed convolution and pooling take NCHW
    inputs of ``dtype`` in ``graph`` (None: the default graph): TensorFlow's oneDNN kernels on
    an x86 processor, in float32, in a graph that no float16 rewrite awaits
    (:func:`~tensorpack_lite.precision.mixed_precision.float16_rewrite_expected`: the rewritten
    ops would be float16, whose pooling gradients have no NCHW kernel on a CPU)."""
    if tf.as_dtype(dtype).base_dtype != tf.float32 or not onednn_enabled():
        return False
    if platform.machine().lower() not in ('x86_64', 'amd64'):
        return False
    return not float16_rewrite_expected(graph or tf.compat.v1.get_default_graph())


def nchw_strategy(device=None, dtype=tf.float32):
    """:data:`NATIVE` or :data:`TRANSPOSE`: how an NCHW kernel of a layer runs on ``device``
    with inputs of ``dtype``.

    A CPU device means :data:`NATIVE` where :func:`cpu_runs_nchw`, else :data:`TRANSPOSE`. Any
    other device (a GPU, or no device type: TensorFlow then picks a GPU when there is one) means
    :data:`NATIVE` when the process has a GPU; without one, soft placement puts a GPU tower's
    ops on the CPU (as ``SyncMultiGPUTrainerReplicated(max(get_num_gpu(), 1))`` does on a
    machine without GPU), which decides as a CPU device.

    Args:
        device (str): a device string ('/gpu:0', '/job:worker/task:1/device:CPU:0'...); None
            means :func:`current_device` (asked only when the process has a GPU).
        dtype (tf.DType): the dtype of the kernel's input.
    """
    on_cpu = not process_has_gpu()
    if not on_cpu:
        if device is None:
            device = current_device()
        on_cpu = (tf.DeviceSpec.from_string(device).device_type or '').upper() == 'CPU'
    if on_cpu:
        return NATIVE if cpu_runs_nchw(dtype) else TRANSPOSE
    return NATIVE


def call_in_data_format(kernel, x, data_format):
    """``kernel(x, data_format)`` for a 4-D ``x`` in ``data_format``, computed where the
    current device can compute it.

    Args:
        kernel: a function ``(inputs, data_format) -> 4-D tensor`` that builds its ops for
            ``data_format`` 'NHWC' or 'NCHW'; its result is in the same format as its input.
        x (tf.Tensor): the input, in ``data_format``.
        data_format (str): 'NHWC'/'channels_last' or 'NCHW'/'channels_first'.

    Returns:
        The kernel's result, in ``data_format``. With NCHW and :data:`TRANSPOSE` (for ``x``'s
        dtype), the kernel gets ``x`` transposed to NHWC (op ``to_nhwc``) and its result is
        transposed back (op ``to_nchw``): two transposes of activations per call, and two more
        of their gradients in training.
    """
    data_format = get_data_format(data_format, keras_mode=False)
    if data_format == 'NHWC' or nchw_strategy(dtype=x.dtype) == NATIVE:
        return kernel(x, data_format)
    nhwc = tf.transpose(x, _NCHW_TO_NHWC, name='to_nhwc')
    return tf.transpose(kernel(nhwc, 'NHWC'), _NHWC_TO_NCHW, name='to_nchw')
