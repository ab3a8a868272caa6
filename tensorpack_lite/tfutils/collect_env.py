"""A table describing the environment (Python, TensorFlow, libraries, CPUs, GPUs), to paste
into a bug report or log at the start of training.

Example::

    from tensorpack_lite.tfutils import collect_env_info
    print(collect_env_info())
"""

import ctypes.util
import importlib
import os
import sys
from collections import OrderedDict

__all__ = ['collect_env_info', 'parse_TF_build_info']

# Optional libraries shown when installed: (row label, module to import).
_OPTIONAL_PACKAGES = (('Horovod', 'horovod'), ('cv2', 'cv2'), ('msgpack', 'msgpack'), ('pyzmq', 'zmq'),
                      ('lmdb', 'lmdb'), ('h5py', 'h5py'))


def _package_version(module_name):
    module = importlib.import_module(module_name)
    version = getattr(module, '__version__', None)
    if version is None and hasattr(module, 'version'):     # msgpack: a tuple
        version = module.version
    if isinstance(version, tuple):
        version = '.'.join(str(x) for x in version)
    return '{} @{}'.format(version, os.path.dirname(module.__file__))


def _tensorflow_rows():
    from ..compat import tf
    rows = OrderedDict()
    rows['TensorFlow'] = '{}/{} @{}'.format(tf.version.VERSION, tf.version.GIT_VERSION,
                                            os.path.dirname(tf.__file__))
    rows['TF Compiler Version'] = tf.version.COMPILER_VERSION
    rows['TF CUDA support'] = tf.test.is_built_with_cuda()
    rows.update(parse_TF_build_info())
    return rows


def parse_TF_build_info():
    """What TensorFlow was built with, from ``tf.sysconfig.get_build_info()``: an OrderedDict
    with ``'TF built with CUDA'``, ``'TF built with CUDNN'`` and ``'TF compute capabilities'``
    (comma-separated, e.g. ``'sm_70,sm_80'``) for those the build names (none for a CPU build).
    """
    from ..compat import tf
    build = tf.sysconfig.get_build_info()
    rows = OrderedDict()
    if build.get('cuda_version'):
        rows['TF built with CUDA'] = build['cuda_version']
    if build.get('cudnn_version'):
        rows['TF built with CUDNN'] = build['cudnn_version']
    if build.get('cuda_compute_capabilities'):
        rows['TF compute capabilities'] = ','.join(
            c.replace('compute_', '') for c in build['cuda_compute_capabilities'])
    return rows


def _gpu_rows():
    from ..utils.nvml import NVMLContext
    rows = OrderedDict()
    rows['CUDA_VISIBLE_DEVICES'] = os.environ.get('CUDA_VISIBLE_DEVICES', 'Unspecified')
    for label, library in (('Nvidia Driver', 'nvidia-ml'), ('CUDA libs', 'cudart'), ('CUDNN libs', 'cudnn'),
                           ('NCCL libs', 'nccl')):
        rows[label] = ctypes.util.find_library(library) or 'not found'
    try:
        by_name = OrderedDict()
        with NVMLContext() as ctx:
            for idx, device in enumerate(ctx.devices()):
                by_name.setdefault(device.name(), []).append(str(idx))
        for name, ids in by_name.items():
            rows['GPU ' + ','.join(ids)] = name
        if not by_name:
            rows['GPU'] = 'none found by NVML'
    except Exception as err:
        rows['GPU'] = 'not found with NVML ({})'.format(type(err).__name__)
    return rows


def _machine_rows():
    import psutil
    memory = psutil.virtual_memory()
    free_ram = '{:.2f}/{:.2f} GB'.format(memory.available / 1024 ** 3, memory.total / 1024 ** 3)
    return OrderedDict([('Free RAM', free_ram), ('CPU Count', psutil.cpu_count())])


def _rows_of(label, collect):
    """The rows ``collect()`` gives, or one row saying why it could not."""
    try:
        return list(collect().items())
    except Exception as err:
        return [(label, 'unavailable ({}: {})'.format(type(err).__name__, err))]


def collect_env_info():
    """A plain-text table (``tabulate``) of what matters to reproduce a run: the platform,
    Python, tensorpack_lite, numpy and TensorFlow (version, build, CUDA support), the GPUs and
    NVIDIA libraries, memory and CPUs, and the optional libraries that are installed.

    It never raises because something is missing: such a row says "unavailable" or "not
    installed".
    """
    from tabulate import tabulate
    from .. import libinfo
    import numpy as np

    data = [('sys.platform', sys.platform), ('Python', sys.version.replace('\n', ' ')),
            ('tensorpack_lite', '{} @{}'.format(libinfo.__version__,
                                                os.path.dirname(os.path.abspath(libinfo.__file__)))),
            ('Numpy', np.__version__)]
    data += _rows_of('TensorFlow', _tensorflow_rows)
    data += _rows_of('GPU', _gpu_rows)
    data += _rows_of('Machine', _machine_rows)
    for label, module_name in _OPTIONAL_PACKAGES:
        try:
            data.append((label, _package_version(module_name)))
        except ImportError:
            data.append((label, 'not installed'))
        except Exception as err:
            data.append((label, 'unavailable ({}: {})'.format(type(err).__name__, err)))
    return tabulate(data)
