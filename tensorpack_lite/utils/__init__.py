"""General utilities that do not depend on TensorFlow: logging, argument tools, statistics,
random generators, progress bars, timing, GPU counting and concurrency helpers.

The other submodules are imported by their full names, as in tensorpack:
``utils.fs`` (files, downloads), ``utils.viz``, ``utils.palette``, ``utils.gpu``,
``utils.nvml``, ``utils.debug``, ``utils.serialize``, ``utils.loadcaffe``...

Importing this package never imports TensorFlow (only :func:`graph_memoized` functions,
:class:`ShareSessionThread` and, as a last resort, :func:`get_num_gpu` do, when used).
"""

from . import logger
from .argtools import (call_only_once, graph_memoized, log_once, map_arg, memoized,
                       memoized_ignoreargs, memoized_method, shape2d, shape4d)
from .concurrency import (DIE, LoopThread, ShareSessionThread, StoppableThread,
                          enable_death_signal, ensure_proc_terminate, mask_sigint,
                          start_proc_mask_signal, subproc_call)
from .gpu import get_nr_gpu, get_num_gpu
from .stats import Accuracy, BinaryStatistics, RatioCounter, StatCounter
from .timer import Timer, print_total_timer, timed_operation, total_timer
from .utils import (change_env, execute_only_once, fix_rng_seed, get_rng, get_time_str, get_tqdm,
                    get_tqdm_kwargs, humanize_time_delta)

__all__ = [
    'logger',
    # utils
    'change_env', 'execute_only_once', 'fix_rng_seed', 'get_rng', 'get_time_str', 'get_tqdm',
    'get_tqdm_kwargs', 'humanize_time_delta',
    # argtools
    'call_only_once', 'graph_memoized', 'log_once', 'map_arg', 'memoized',
    'memoized_ignoreargs', 'memoized_method', 'shape2d', 'shape4d',
    # stats
    'StatCounter', 'RatioCounter', 'Accuracy', 'BinaryStatistics',
    # timer
    'timed_operation', 'total_timer', 'print_total_timer', 'Timer',
    # gpu
    'get_num_gpu', 'get_nr_gpu',
    # concurrency
    'StoppableThread', 'LoopThread', 'ShareSessionThread', 'DIE', 'ensure_proc_terminate',
    'start_proc_mask_signal', 'mask_sigint', 'enable_death_signal', 'subproc_call',
]
