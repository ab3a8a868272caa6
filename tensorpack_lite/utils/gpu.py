"""How many GPUs this process can use, found cheaply (without importing TensorFlow when possible),
and choosing the visible GPUs for a block of code."""

import os
import re
import shutil

from . import logger
from .utils import change_env

__all__ = ['get_num_gpu', 'get_nr_gpu', 'change_gpu', 'num_tensorflow_gpus', 'parse_cuda_visible_devices',
           'cuda_visible_devices']

_NVIDIA_SMI_TIMEOUT = 5


_DEVICE_ENTRY = re.compile(r'\d+|(?:GPU|MIG)-\S*')


def parse_cuda_visible_devices(value):
    """The devices a ``CUDA_VISIBLE_DEVICES`` value exposes, in order, as CUDA reads it: the
    comma-separated entries up to the first one that is not a device (a negative or invalid
    index stops the list), each an index (``'3'``) or a UUID (``'GPU-...'``, ``'MIG-...'``).

    ``''`` and ``'-1'`` give ``[]``; ``'0,-1,1'`` gives ``['0']``. Indices past the machine's
    last GPU, which CUDA also stops at, are not known here and are kept.
    """
    devices = []
    for entry in value.split(','):
        entry = entry.strip()
        if not _DEVICE_ENTRY.fullmatch(entry):
            break
        devices.append(entry)
    return devices


def cuda_visible_devices(environ=None):
    """:func:`parse_cuda_visible_devices` of ``$CUDA_VISIBLE_DEVICES``; None when it is not set
    (then every GPU of the machine is visible)."""
    value = (os.environ if environ is None else environ).get('CUDA_VISIBLE_DEVICES')
    return None if value is None else parse_cuda_visible_devices(value)


def _count_with_nvidia_smi():
    """GPU count from ``nvidia-smi -L``, or None when it is unavailable or fails."""
    if shutil.which('nvidia-smi') is None:
        return None
    from .concurrency import subproc_call  # local: keeps this module's import light
    output, code = subproc_call(['nvidia-smi', '-L'], timeout=_NVIDIA_SMI_TIMEOUT)
    if code != 0:
        return None
    lines = output.decode('utf-8', errors='replace').splitlines()
    # one "GPU i: <name> (UUID: ...)" line per GPU; MIG slices are listed on indented lines
    return sum(1 for line in lines if line.startswith('GPU '))


def num_tensorflow_gpus():
    """How many GPUs TensorFlow sees in this process (the ``'/gpu:N'`` it can place ops on).
    Imports TensorFlow; :func:`get_num_gpu` answers without it."""
    from ..compat import tf
    return len(tf.config.list_physical_devices('GPU'))


def _count_with_tensorflow():
    try:
        return num_tensorflow_gpus()
    except Exception as err:  # a broken TF install must not break a mere count
        logger.debug("get_num_gpu(): TensorFlow could not list GPUs: {}".format(err))
        return 0


def get_num_gpu():
    """The number of GPUs available to this process, as an int. Never raises.

    In order: ``$CUDA_VISIBLE_DEVICES`` when set (the empty string means none);
    else ``nvidia-smi -L`` when it is on PATH (with a timeout); 0 when there is no
    ``nvidia-smi`` at all; TensorFlow is asked only when ``nvidia-smi`` exists but fails.
    """
    try:
        visible = cuda_visible_devices()
        if visible is not None:
            return len(visible)
        if shutil.which('nvidia-smi') is None:
            return 0
        num = _count_with_nvidia_smi()
        if num is not None:
            return num
        logger.info("nvidia-smi failed; asking TensorFlow for the number of GPUs ...")
        return _count_with_tensorflow()
    except Exception as err:  # pragma: no cover - defensive
        logger.warn("get_num_gpu() failed ({}); assuming 0 GPUs".format(err))
        return 0


get_nr_gpu = get_num_gpu
"""Old name of :func:`get_num_gpu`."""


def change_gpu(val):
    """A context in which ``$CUDA_VISIBLE_DEVICES`` is ``val``: a GPU index, a comma-separated
    list, or -1 for no GPU (the empty value). The old value comes back afterwards.

    It affects what CUDA sees only where it is read: in processes started inside the block,
    or in this process before TensorFlow first touches the GPUs.

    Example::

        with change_gpu(1):
            proc.start()      # the child process sees only GPU 1
    """
    val = str(val)
    return change_env('CUDA_VISIBLE_DEVICES', '' if val == '-1' else val)
