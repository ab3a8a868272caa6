"""Where towers and variables go: the devices a list of towers names, a device function
that spreads variables over parameter-server devices, and a scope that makes variables
local (not saved, not shared).

A tower is named by a GPU id (``0`` is ``'/gpu:0'``) or by a device string
(``'/cpu:1'``), so that data-parallel code runs on virtual CPU devices too::

    towers = interpret_towers(['/cpu:0', '/cpu:1'])   # ['/cpu:0', '/cpu:1']
    towers = interpret_towers(2)                      # [0, 1]: GPUs 0 and 1
"""

import numbers
import operator
from contextlib import contextmanager

from ..compat import tf, tfv1
from ..multiprocess.collective import communication_hint  # re-exported: the devices' hint
from ..tfutils.varreplace import custom_getter_scope
from ..utils import logger
from ..utils.argtools import is_int
from ..utils.gpu import get_num_gpu

__all__ = ['interpret_towers', 'tower_device', 'is_gpu_tower', 'communication_hint',
           'check_session_devices', 'task_cpu',
           'LeastLoadedDeviceSetter', 'override_to_local_variable', 'local_collections']


def tower_device(tower):
    """The device string of a tower: ``'/gpu:k'`` for a GPU id ``k``, else the string itself."""
    if is_int(tower):
        return '/gpu:{}'.format(int(tower))
    return tower


def task_cpu(job_name, task_index):
    """The CPU of a task of a cluster, e.g. ``'/job:worker/task:1/device:CPU:0'``."""
    return '/job:{}/task:{}/device:CPU:0'.format(job_name, task_index)


def is_gpu_tower(tower):
    """Whether a tower (GPU id or device string) is on a GPU."""
    return tf.DeviceSpec.from_string(tower_device(tower)).device_type.upper() == 'GPU'


def _device_spec(device, owner):
    try:
        spec = tf.DeviceSpec.from_string(device)
    except (ValueError, TypeError) as err:
        raise ValueError("{}: '{}' is not a device string such as '/cpu:0' or '/gpu:1' ({})".format(
            owner, device, err)) from None
    if not spec.device_type:
        raise ValueError("{}: device '{}' names no device type (write e.g. '/cpu:0' or '/gpu:1')".format(
            owner, device))
    return spec


def _type_and_index(spec):
    return spec.device_type.upper(), spec.device_index or 0


def interpret_towers(gpus, owner='DataParallel'):
    """The list of towers a data-parallel trainer or predictor is given.

    Args:
        gpus (int or list): a number of GPUs ``n`` (GPUs ``0..n-1``), a list of GPU ids, or a
            list of device strings (``['/cpu:0', '/cpu:1']``, ``['/gpu:0', '/gpu:2']``).
        owner (str): named in error messages.

    Returns:
        list: the towers, ints (GPU ids) or device strings, in order.

    A GPU that this process cannot see (see :func:`get_num_gpu`), an empty list, a bad device
    string or a device given twice is a ValueError naming it. CPU devices are checked when the
    session exists (:func:`check_session_devices`).
    """
    if is_int(gpus):
        if gpus <= 0:
            raise ValueError("{}: the number of GPUs must be positive, got {}".format(owner, gpus))
        towers = list(range(int(gpus)))
    elif isinstance(gpus, (list, tuple)):
        towers = list(gpus)
    else:
        raise TypeError("{}: gpus must be an int, a list of GPU ids or a list of device strings, "
                        "got {!r}".format(owner, gpus))
    if not towers:
        raise ValueError("{}: the list of towers is empty".format(owner))
    seen = {}
    for index, tower in enumerate(towers):
        if not (is_int(tower) or isinstance(tower, str)):
            raise TypeError("{}: tower {} is {!r}; give a GPU id (int) or a device string".format(
                owner, index, tower))
        if isinstance(tower, numbers.Integral) and tower < 0:
            raise ValueError("{}: tower {} has the negative GPU id {}".format(owner, index, tower))
        key = _type_and_index(_device_spec(tower_device(tower), owner))
        if key in seen:
            raise ValueError("{}: towers {} and {} are both on device {}:{}".format(
                owner, seen[key], index, *key))
        seen[key] = index
    _check_gpus_exist(towers, seen, owner)
    return towers


def _check_gpus_exist(towers, tower_of_device, owner):
    gpu_towers = sorted((index, tower) for (kind, index), tower in tower_of_device.items() if kind == 'GPU')
    if not gpu_towers:
        return
    num_gpu = get_num_gpu()
    if num_gpu == 0 and len(towers) == 1:   # as in tensorpack, soft placement runs it on the CPU
        return
    for gpu_index, tower in gpu_towers:
        if gpu_index >= num_gpu:
            raise ValueError(
                "{}: tower {} asks for GPU {} ({!r}), but this process sees {} GPU(s). With fewer "
                "devices than towers, use fewer towers; to run towers on (virtual) CPU devices, "
                "give device strings such as ['/cpu:0', '/cpu:1'] and create the session with "
                "tf.compat.v1.ConfigProto(device_count={{'CPU': {}}}).".format(
                    owner, tower, gpu_index, towers[tower], num_gpu, len(towers)))


def check_session_devices(sess, devices, owner='DataParallel'):
    """Raise a ValueError unless every device of ``devices`` exists in session ``sess``.

    Soft placement would otherwise move the ops of a missing device onto another one, which
    silently serializes the towers (or makes collective ops wait forever). A single tower is
    not checked: as in tensorpack, soft placement runs it where it can (``'/gpu:0'`` on a
    machine without GPU runs on the CPU).
    """
    if len(devices) == 1:
        return
    available = {}
    for dev in sess.list_devices():
        available.setdefault(_type_and_index(tf.DeviceSpec.from_string(dev.name)), dev.name)
    for index, device in enumerate(devices):
        key = _type_and_index(_device_spec(device, owner))
        if key not in available:
            raise ValueError(
                "{}: tower {} is on device '{}', which this session does not have (it has: {}). "
                "For towers on virtual CPU devices, create the session with "
                "tf.compat.v1.ConfigProto(device_count={{'CPU': {}}}), e.g. "
                "NewSessionCreator(config=...).".format(
                    owner, index, device, ', '.join(sorted(available.values())), len(devices)))


_VARIABLE_OP_TYPES = ('Variable', 'VariableV2', 'VarHandleOp')


class LeastLoadedDeviceSetter:
    """A device function: variables go to the parameter-server device holding the fewest
    variable elements so far, every other op to ``worker_device``. Ops that already have a
    device keep it.

    Example::

        with tf.device(LeastLoadedDeviceSetter('/gpu:0', ['/gpu:0', '/gpu:1'])):
            build_tower()
    """

    def __init__(self, worker_device, ps_devices):
        """
        Args:
            worker_device (str): the device of the computation.
            ps_devices (list[str]): the devices variables are spread over.
        """
        if not ps_devices:
            raise ValueError("LeastLoadedDeviceSetter needs at least one ps device")
        self.worker_device = worker_device
        self.ps_devices = list(ps_devices)
        self.ps_sizes = [0] * len(self.ps_devices)

    @staticmethod
    def _canonical(device):
        return tfv1.DeviceSpec.from_string(device).to_string()

    def __call__(self, op):
        if op.device:
            return op.device
        if op.type not in _VARIABLE_OP_TYPES:
            return self._canonical(self.worker_device)
        index, _ = min(enumerate(self.ps_sizes), key=operator.itemgetter(1))
        self.ps_sizes[index] += self._num_elements(op)
        return self._canonical(self.ps_devices[index])

    @staticmethod
    def _num_elements(op):
        shape = tf.TensorShape(op.get_attr('shape')) if op.type == 'VarHandleOp' else op.outputs[0].shape
        size = shape.num_elements()
        if size is None:
            logger.warn("LeastLoadedDeviceSetter: the shape of variable {} is not fully defined; "
                        "it counts as empty.".format(op.name))
            return 0
        return size

    def __str__(self):
        return "LeastLoadedDeviceSetter({})".format(self.worker_device)


@contextmanager
def override_to_local_variable(enable=True):
    """Variables created by ``get_variable`` inside go to ``LOCAL_VARIABLES`` instead of
    ``GLOBAL_VARIABLES`` (trainable ones stay trainable): they are neither saved in
    checkpoints nor initialized from them. The replicas of a replicated trainer are such.

    Args:
        enable (bool): when False, nothing changes.
    """
    if not enable:
        yield
        return

    def local_getter(getter, name, *args, **kwargs):
        kwargs['collections'] = local_collections(kwargs.get('collections'))
        return getter(name, *args, **kwargs)

    with custom_getter_scope(local_getter):
        yield


def local_collections(collections):
    """The collections of a variable made local: ``collections`` (None: the default,
    ``GLOBAL_VARIABLES``) with ``LOCAL_VARIABLES`` instead of ``GLOBAL_VARIABLES``."""
    local = set(collections or [tfv1.GraphKeys.GLOBAL_VARIABLES])
    local.discard(tfv1.GraphKeys.GLOBAL_VARIABLES)
    local.add(tfv1.GraphKeys.LOCAL_VARIABLES)
    return sorted(local)
