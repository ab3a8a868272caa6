"""Miscellaneous helpers: random generators, progress bars, human-readable durations,
environment changes and once-per-call-site guards."""

import inspect
import os
import sys
from contextlib import contextmanager
from datetime import datetime

import numpy as np
from tqdm import tqdm

from . import logger
from .mpi_launcher import mpi_rank_and_size

__all__ = ['get_rng', 'fix_rng_seed', 'fixed_rng_seed', 'get_tqdm', 'get_tqdm_kwargs', 'humanize_time_delta',
           'change_env', 'get_time_str', 'execute_only_once', 'PROGRESS_REFRESH_ENV_VAR']

PROGRESS_REFRESH_ENV_VAR = 'TENSORPACK_PROGRESS_REFRESH'
"""Environment variable that overrides the refresh interval (seconds) of progress bars."""

_RNG_SEED = None
_CALL_SITES_SEEN = set()


def fix_rng_seed(seed):
    """Make every later :func:`get_rng` return a generator seeded with ``seed`` (reproducible runs).

    Example::

        fix_rng_seed(42)
        rng = get_rng(self)  # the same numbers on every run
    """
    global _RNG_SEED
    _RNG_SEED = int(seed)


def fixed_rng_seed():
    """The seed given to :func:`fix_rng_seed`, or None if none was."""
    return _RNG_SEED


def get_rng(obj=None):
    """A fresh ``np.random.RandomState``.

    Its seed mixes ``id(obj)``, the process id and the current time, so that e.g. forked
    DataFlow workers draw different numbers; after :func:`fix_rng_seed` it is the fixed seed.
    """
    if _RNG_SEED is not None:
        return np.random.RandomState(_RNG_SEED)
    now = int(datetime.now().strftime('%Y%m%d%H%M%S%f'))
    seed = (id(obj) + os.getpid() + now) % 4294967295
    return np.random.RandomState(seed)


def _default_refresh_interval(stream):
    """Seconds between progress-bar redraws: quick on a terminal, rare in a log file."""
    if hasattr(stream, 'isatty') and stream.isatty():
        return 0.5
    if 'SLURM_JOB_ID' in os.environ or mpi_rank_and_size() is not None:
        return 60
    return 180


def get_tqdm_kwargs(**kwargs):
    """Keyword arguments for ``tqdm`` with the library's defaults; ``kwargs`` override them."""
    defaults = dict(smoothing=0.5, dynamic_ncols=True, ascii=True,
                    bar_format='{l_bar}{bar}|{n_fmt}/{total_fmt}[{elapsed}<{remaining},{rate_noinv_fmt}]')
    refresh = os.environ.get(PROGRESS_REFRESH_ENV_VAR)
    if refresh is not None:
        defaults['mininterval'] = float(refresh)
    else:
        defaults['mininterval'] = _default_refresh_interval(kwargs.get('file', sys.stderr))
    defaults.update(kwargs)
    return defaults


def get_tqdm(*args, **kwargs):
    """A ``tqdm`` progress bar built with :func:`get_tqdm_kwargs`."""
    return tqdm(*args, **get_tqdm_kwargs(**kwargs))


def humanize_time_delta(sec):
    """Format a duration for people.

    Examples::

        humanize_time_delta(1)         # '1 second'
        humanize_time_delta(0.01)      # '0.01 seconds'
        humanize_time_delta(87.6)      # '1 minute 27 seconds'
        humanize_time_delta(3601)      # '1 hour 1 second'
        humanize_time_delta(86400 + 9 * 3600 + 123)  # '1 day 9 hours 2 minutes 3 seconds'
    """
    if sec < 0:
        logger.warn("humanize_time_delta() was given a negative duration: {}".format(sec))
        return "{:.3g} seconds".format(sec)
    if sec == 0:
        return "0 seconds"

    def unit(value, name):
        plural = 's' if value != 1 else ''
        # whole counts print in full ('1500 days', not '1.5e+03 days'); fractions use 3 digits
        text = "{:d}".format(value) if isinstance(value, int) else "{:.3g}".format(value)
        return "{} {}{}".format(text, name, plural)

    if sec < 60:
        return unit(sec, 'second')
    whole = int(sec)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [unit(v, name) for v, name in
             ((days, 'day'), (hours, 'hour'), (minutes, 'minute'), (seconds, 'second')) if v > 0]
    return ' '.join(parts)


@contextmanager
def change_env(name, value):
    """Temporarily set environment variable ``name`` to ``value`` (None removes it)."""
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def get_time_str():
    """The current time as ``'MMDD-HHMMSS'``, as used in backup names."""
    return datetime.now().strftime('%m%d-%H%M%S')


def execute_only_once():
    """True the first time it is called from a given line of code, False every later time.

    The call site is the (file, line) of the caller, so each ``if execute_only_once():`` in
    the code fires once per process.

    Example::

        for path in paths:
            if execute_only_once():
                logger.info("reading the first file")   # logged once, not once per path
    """
    caller = inspect.currentframe().f_back
    site = (caller.f_code.co_filename, caller.f_lineno)
    if site in _CALL_SITES_SEEN:
        return False
    _CALL_SITES_SEEN.add(site)
    return True
