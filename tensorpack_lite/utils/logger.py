"""The library's logger: colored messages on the terminal, the same messages in ``log.log``.

The logger directory is where training writes everything it produces (``log.log``,
``stats.json``, TensorBoard event files, checkpoints).  Set it with :func:`set_logger_dir`
or :func:`auto_set_dir` before training.

Example::

    from tensorpack_lite.utils import logger
    logger.set_logger_dir('train_log/mnist', action='k')
    logger.info("written to the terminal and to train_log/mnist/log.log")

A URL of object storage (``s3://bucket/run``, ``gs://bucket/run``) works in a local mirror
directory (:func:`~tensorpack_lite.utils.object_store.local_mirror_dir`): :func:`get_logger_dir`
returns that local directory, :func:`get_logger_url` the URL, and
:class:`~tensorpack_lite.checkpoint.remote.RemoteMirror` moves the files (docs/checkpoints.md).
"""

import contextlib
import errno
import logging
import os
import shutil
import sys
from datetime import datetime

from termcolor import colored

from .object_store import is_remote_url, local_mirror_dir, remote_filesystem

__all__ = ['set_logger_dir', 'auto_set_dir', 'get_logger_dir', 'get_logger_url', 'unset_logger_dir',
           'without_logger_dir',
           'info', 'warning', 'warn', 'error', 'exception', 'debug', 'critical', 'setLevel', 'addFilter',
           'LOG_FILE_NAME', 'ACTION_ENV_VAR']

LOG_FILE_NAME = 'log.log'
ACTION_ENV_VAR = 'TENSORPACK_LOGGER_ACTION'
"""Environment variable read by :func:`set_logger_dir` when no action is given and stdin is no TTY."""

_ACTIONS = {
    'k': 'keep the directory and append to it',
    'd': 'delete the directory and start afresh',
    'b': 'rename the directory to a timestamped backup and start afresh',
    'n': 'leave the directory alone and log to a new, timestamped one',
    'q': 'quit',
}


class _ColorFormatter(logging.Formatter):
    """Prefixes each record with a green timestamp and its source, and a colored level tag."""

    _LEVEL_TAGS = {
        logging.WARNING: colored('WRN', 'red', attrs=['blink']),
        logging.ERROR: colored('ERR', 'red', attrs=['blink', 'underline']),
        logging.CRITICAL: colored('ERR', 'red', attrs=['blink', 'underline']),
        logging.DEBUG: colored('DBG', 'yellow', attrs=['blink']),
    }

    def format(self, record):
        prefix = colored('[%(asctime)s @%(filename)s:%(lineno)d]', 'green')
        tag = self._LEVEL_TAGS.get(record.levelno)
        fmt = prefix + ' ' + (tag + ' ' if tag else '') + '%(message)s'
        self._style._fmt = fmt
        return super().format(record)


class _PlainFormatter(logging.Formatter):
    """The file-side formatter: no escape codes, full date."""

    def __init__(self):
        super().__init__('[%(asctime)s @%(filename)s:%(lineno)d] %(levelname).3s %(message)s',
                         datefmt='%Y-%m-%d %H:%M:%S')


def _make_logger():
    lg = logging.getLogger('tensorpack_lite')
    lg.propagate = False
    lg.setLevel(logging.INFO)
    if not lg.handlers:
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(_ColorFormatter(datefmt='%m%d %H:%M:%S'))
        lg.addHandler(handler)
    return lg


_logger = _make_logger()
info = _logger.info
warning = _logger.warning
warn = _logger.warning
error = _logger.error
exception = _logger.exception
debug = _logger.debug
critical = _logger.critical
setLevel = _logger.setLevel
addFilter = _logger.addFilter

_LOGGER_DIR = None
_LOGGER_URL = None
_FILE_HANDLER = None


def _timestamp():
    return datetime.now().strftime('%m%d-%H%M%S')


def _unused_name(base):
    """``base``, or ``base.1``, ``base.2``... whichever does not exist yet."""
    name, i = base, 0
    while os.path.exists(name):
        i += 1
        name = '{}.{}'.format(base, i)
    return name


def _attach_file_handler(path):
    """Log to ``path`` too, an existing file backed up first. The processes of a job that share
    the directory (the ranks of a HorovodTrainer, docs/horovod.md) may all do this at once: one
    of them backs the old file up, one whose backup finds it gone goes on, and each appends."""
    global _FILE_HANDLER
    if os.path.isfile(path):
        backup = _unused_name(path + '.' + _timestamp())
        try:
            os.rename(path, backup)
        except FileNotFoundError:     # another process of the job backed it up first
            pass
        else:
            info("Existing log file '{}' backed up to '{}'".format(path, backup))
    handler = logging.FileHandler(filename=path, encoding='utf-8', mode='a')
    handler.setFormatter(_PlainFormatter())
    _FILE_HANDLER = handler
    _logger.addHandler(handler)
    info("Argv: " + ' '.join(sys.argv))


def unset_logger_dir():
    """Stop writing the log file of :func:`set_logger_dir`: :func:`get_logger_dir` is None again."""
    global _FILE_HANDLER, _LOGGER_DIR, _LOGGER_URL
    if _FILE_HANDLER is not None:
        _logger.removeHandler(_FILE_HANDLER)
        _FILE_HANDLER.close()
        _FILE_HANDLER = None
    _LOGGER_DIR = _LOGGER_URL = None


@contextlib.contextmanager
def without_logger_dir():
    """Within the ``with`` block there is no logger directory (:func:`get_logger_dir` is None)
    and nothing is written to its log file; after it, both are back as they were, the same log
    file appended to (nothing is backed up or written when detaching or attaching). For work
    that must leave the run's directory alone, e.g. a learning-rate sweep before training.

    Example::

        with logger.without_logger_dir():
            logger.info("on the terminal only")
    """
    global _FILE_HANDLER, _LOGGER_DIR, _LOGGER_URL
    saved = _FILE_HANDLER, _LOGGER_DIR, _LOGGER_URL
    if _FILE_HANDLER is not None:
        _logger.removeHandler(_FILE_HANDLER)
    _FILE_HANDLER = _LOGGER_DIR = _LOGGER_URL = None
    try:
        yield
    finally:
        unset_logger_dir()      # whatever the block set
        _FILE_HANDLER, _LOGGER_DIR, _LOGGER_URL = saved
        if _FILE_HANDLER is not None:
            _logger.addHandler(_FILE_HANDLER)


def _dir_has_content(dirname):
    return os.path.isdir(dirname) and len([x for x in os.listdir(dirname) if x[0] != '.']) > 0


def _choose_action(dirname, action):
    """Returns the action to take on an existing, non-empty ``dirname``. Never blocks without a TTY."""
    if action is None:
        action = os.environ.get(ACTION_ENV_VAR) or None
    if action is None:
        if not sys.stdin or not sys.stdin.isatty():
            raise RuntimeError(
                "Log directory '{}' already exists and is not empty, and no action was given. "
                "Pass action= to set_logger_dir()/auto_set_dir() or set ${} to one of {} "
                "({}).".format(dirname, ACTION_ENV_VAR, '/'.join(_ACTIONS),
                               '; '.join('{}: {}'.format(k, v) for k, v in _ACTIONS.items())))
        warn("Log directory {} exists!".format(dirname))
        for key, meaning in _ACTIONS.items():
            info("  {}: {}".format(key, meaning))
        action = input("Select action ({}): ".format('/'.join(_ACTIONS))).lower().strip()
    return _validate_action(action)


def _validate_action(action):
    """Normalise ``action`` and return it; ValueError when it is not one of the known ones."""
    action = str(action).lower().strip()
    if action not in _ACTIONS:
        raise ValueError("Unknown logger directory action '{}'; choose one of {}.".format(
            action, ', '.join('{} ({})'.format(k, v) for k, v in _ACTIONS.items())))
    return action


def set_logger_dir(dirname, action=None):
    """Make ``dirname`` the logger directory and log to ``dirname/log.log`` as well.

    A URL of object storage (``s3://bucket/run``, ``gs://bucket/run``: fsspec with s3fs or
    gcsfs, ``pip install 'tensorpack_lite[s3]'``) works in its local mirror directory
    (``$TENSORPACK_LITE_CACHE/remote/<scheme>/<bucket>/<path>``, by default under
    ``~/.cache/tensorpack_lite``), which :func:`get_logger_dir` returns; :func:`get_logger_url`
    gives the URL. There the actions are 'k' (the bucket's ``log.log`` is fetched first and
    backed up as a local one is), 'd' (deletes the objects under the URL and the mirror), 'n'
    (a new, timestamped URL) and 'q'; 'b' is refused (object stores cannot rename).

    Args:
        dirname (str): the directory (created when missing), or a URL of object storage.
        action (str): what to do when ``dirname`` exists and is not empty: 'k' keep (append,
            e.g. to resume), 'd' delete, 'b' back it up under a timestamped name, 'n' use a new
            timestamped directory instead, 'q' quit.  When None, ``$TENSORPACK_LOGGER_ACTION``
            is read; failing that the user is asked on a terminal, and without a terminal
            (e.g. CI) a RuntimeError explains what to set.
    """
    global _LOGGER_DIR
    if is_remote_url(dirname):
        return _set_remote_logger_dir(dirname, action)
    dirname = os.path.normpath(dirname)
    if action is not None:  # reject a typo now, not only on the day the directory exists
        _validate_action(action)
    unset_logger_dir()
    if _dir_has_content(dirname):
        chosen = _choose_action(dirname, action)
        if chosen == 'b':
            backup = _unused_name(dirname + '-' + _timestamp())
            shutil.move(dirname, backup)
            info("Directory '{}' backed up to '{}'".format(dirname, backup))
        elif chosen == 'd':
            shutil.rmtree(dirname, ignore_errors=True)
            if os.path.isdir(dirname):  # a file system that lags behind
                shutil.rmtree(dirname, ignore_errors=False)
            info("Deleted directory '{}'".format(dirname))
        elif chosen == 'n':
            dirname = _unused_name(dirname + '-' + _timestamp())
            info("Using a new log directory '{}'".format(dirname))
        elif chosen == 'k':
            pass
        else:  # 'q'
            raise OSError(errno.EEXIST, "Log directory exists and the user chose to quit", dirname)
    os.makedirs(dirname, exist_ok=True)
    _LOGGER_DIR = dirname
    _attach_file_handler(os.path.join(dirname, LOG_FILE_NAME))


def _remote_has_content(fs, path):
    fs.invalidate_cache(path)
    try:
        entries = fs.ls(path, detail=False)
        return any(not os.path.basename(entry.rstrip('/')).startswith('.') for entry in entries)
    except FileNotFoundError:
        return False


def _set_remote_logger_dir(url, action):
    """:func:`set_logger_dir` of a URL of object storage."""
    global _LOGGER_DIR, _LOGGER_URL
    if action is not None:
        _validate_action(action)
    url = url.rstrip('/')
    fs, path = remote_filesystem(url)
    unset_logger_dir()
    local = local_mirror_dir(url)
    if _remote_has_content(fs, path) or _dir_has_content(local):
        chosen = _choose_action(url, action)
        if chosen == 'b':
            raise ValueError("Log directory {}: action 'b' (rename to a backup) is not supported on object "
                             "storage, which cannot rename; use 'k', 'd' or 'n'.".format(url))
        if chosen == 'd':
            if _remote_has_content(fs, path):
                fs.rm(path, recursive=True)
            shutil.rmtree(local, ignore_errors=True)
            info("Deleted {} and its local mirror '{}'".format(url, local))
        elif chosen == 'n':
            url = url + '-' + _timestamp()
            fs, path = remote_filesystem(url)
            local = local_mirror_dir(url)
            info("Using a new log directory '{}'".format(url))
        elif chosen == 'q':
            raise OSError(errno.EEXIST, "Log directory exists and the user chose to quit", url)
    os.makedirs(local, exist_ok=True)
    log_file = os.path.join(local, LOG_FILE_NAME)
    if not os.path.exists(log_file):   # the earlier log, backed up as a local one is
        try:
            fs.get_file(path + '/' + LOG_FILE_NAME, log_file)
        except FileNotFoundError:
            pass
    _LOGGER_DIR, _LOGGER_URL = local, url
    _attach_file_handler(log_file)
    info("Log directory {} is mirrored in '{}'".format(url, local))


def auto_set_dir(action=None, name=None):
    """Set the logger directory to ``train_log/<script name>[:name]``.

    The script name is the basename of the main module without its extension.
    """
    main = sys.modules['__main__']
    script = os.path.basename(getattr(main, '__file__', None) or 'interactive')
    dirname = os.path.join('train_log', os.path.splitext(script)[0])
    if name:
        dirname += ':' + name
    set_logger_dir(dirname, action=action)


def get_logger_dir():
    """The logger directory, or None when it was not set; for a URL of object storage, its local
    mirror directory."""
    return _LOGGER_DIR


def get_logger_url():
    """The URL of object storage the logger directory mirrors (e.g. ``'s3://bucket/run'``), or None
    when the logger directory is local or not set."""
    return _LOGGER_URL
