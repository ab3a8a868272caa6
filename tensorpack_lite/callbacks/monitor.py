"""Monitors: where training statistics go (terminal, stats.json, TensorBoard...).

Callbacks and trainers publish through ``trainer.monitors``::

    self.trainer.monitors.put_scalar('val-error', 0.03)

and every registered :class:`MonitorBase` receives it. ``Monitors`` also remembers the
history of every scalar (``get_latest``, ``get_history``).
"""

import itertools
import os
import re
import shutil
import string
import subprocess
import threading
import time
from collections import defaultdict
from datetime import datetime

import numpy as np
from tabulate import tabulate

from ..compat import tfv1
from ..libinfo import __version__
from ..loop.callback import Callback
from ..tfutils.summary import create_image_summary, create_scalar_summary
from ..utils import logger
from ..utils import stats_json
from ..utils.develop import import_optional

__all__ = ['MonitorBase', 'NoOpMonitor', 'Monitors',
           'TFEventWriter', 'JSONWriter', 'ScalarPrinter', 'SendMonitorData', 'CometMLMonitor']

_TOWER_PREFIX = re.compile(r'tower[0-9]+/')


class MonitorBase(Callback):
    """A callback that also receives data put into ``trainer.monitors``.

    Override the ``process*`` methods for the kinds of data the monitor handles.
    """

    _chief_only = False

    def setup_graph(self, trainer):
        # Monitors build no ops, so no name scope is opened.
        self.trainer = trainer
        self.graph = tfv1.get_default_graph()
        self._setup_graph()

    def process_summary(self, summary):
        """Receive a ``tf.compat.v1.Summary`` proto."""

    def process(self, name, value):
        """Receive any other named data (e.g. text or a dict)."""

    def process_scalar(self, name, value):
        """Receive a scalar (a Python int or float)."""

    def process_image(self, name, value):
        """Receive images: an NHWC uint8 array."""

    def process_event(self, event):
        """Receive a ``tf.compat.v1.Event`` proto."""


class NoOpMonitor(MonitorBase):
    """A monitor that ignores everything: stands in for one that cannot work here."""

    def __init__(self, name=None):
        self._name = name

    def __str__(self):
        return "NoOpMonitor({})".format(self._name) if self._name else "NoOpMonitor"


class ScalarHistory(MonitorBase):
    """Keeps every scalar put, as ``(global_step, value)`` pairs."""

    def _setup_graph(self):
        self._history = defaultdict(list)

    def process_scalar(self, name, value):
        self._history[name].append((self.global_step, float(value)))

    def get_latest(self, name):
        history = self._history.get(name)
        if not history:
            raise KeyError("No scalar named '{}' was put into the monitors yet.".format(name))
        return history[-1]

    def get_history(self, name):
        return self._history[name]


def _to_nhwc(images):
    images = np.asarray(images)
    if images.ndim == 2:
        return images[np.newaxis, :, :, np.newaxis]
    if images.ndim == 3:
        # HWC with a channel axis of 1/3/4, otherwise NHW
        return images[np.newaxis] if images.shape[-1] in (1, 3, 4) else images[..., np.newaxis]
    if images.ndim == 4:
        return images
    raise ValueError("An image must be HW, HWC, NHW or NHWC, got shape {}".format(images.shape))


class Monitors(Callback):
    """Dispatches everything put into it to all monitors; keeps the scalar history.

    A trainer owns one, ``trainer.monitors``, created by ``setup_callbacks``.
    """

    _chief_only = False

    def __init__(self, monitors):
        for m in monitors:
            if not isinstance(m, MonitorBase):
                raise TypeError("Monitors takes MonitorBase instances, got {!r} of type {}".format(
                    m, type(m).__name__))
        self._scalar_history = ScalarHistory()
        self._monitors = list(monitors) + [self._scalar_history]

    def _setup_graph(self):
        # The other monitors are registered to the trainer as callbacks of their own.
        self._scalar_history.setup_graph(self.trainer)

    def _dispatch(self, method, *args):
        for m in self._monitors:
            getattr(m, method)(*args)

    def put_summary(self, summary):
        """Put a ``Summary`` proto (or its serialized bytes). Its scalar values are also put as
        scalars, with tower prefixes (``tower0/``) and a ``-summary`` suffix removed."""
        if isinstance(summary, bytes):
            summary = tfv1.Summary.FromString(summary)
        if not isinstance(summary, tfv1.Summary):
            raise TypeError("put_summary() takes a tf.compat.v1.Summary, got {}".format(type(summary)))
        for value in summary.value:
            if value.WhichOneof('value') == 'simple_value':
                value.tag = _TOWER_PREFIX.sub('', value.tag)
                if value.tag.endswith('-summary'):
                    value.tag = value.tag[:-len('-summary')]
                self._dispatch('process_scalar', value.tag, value.simple_value)
        self._dispatch('process_summary', summary)

    def put_scalar(self, name, value):
        """Put a scalar; numpy scalars become Python numbers."""
        if isinstance(value, np.floating):
            value = float(value)
        elif isinstance(value, np.integer):
            value = int(value)
        elif isinstance(value, np.ndarray):
            if value.size != 1:
                raise ValueError("put_scalar('{}') got an array of shape {}".format(name, value.shape))
            value = value.item()
        self._dispatch('process_scalar', name, value)
        self._dispatch('process_summary', create_scalar_summary(name, value))

    def put_image(self, name, images):
        """Put images (HW, HWC, NHW or NHWC, values in [0, 255])."""
        images = _to_nhwc(images)
        self._dispatch('process_image', name, images)
        self._dispatch('process_summary', create_image_summary(name, images))

    def put_event(self, event):
        """Put a ``tf.compat.v1.Event``; its step and wall time are set here."""
        event.step = self.global_step
        event.wall_time = time.time()
        self._dispatch('process_event', event)

    def get_latest(self, name):
        """The latest value of scalar ``name``; KeyError when it was never put."""
        return self._scalar_history.get_latest(name)[1]

    def get_history(self, name):
        """Every ``(global_step, value)`` put for scalar ``name``, oldest first."""
        return self._scalar_history.get_history(name)


# ---------------------------------------------------------------------------------------------
# Monitors that write the statistics somewhere
# ---------------------------------------------------------------------------------------------

def _timestamped_backup_name(path):
    """``path.<MMDD-HHMMSS>``, with a counter appended if that name is taken."""
    backup = '{}.{}'.format(path, datetime.now().strftime('%m%d-%H%M%S'))
    candidate, index = backup, 1
    while os.path.exists(candidate):
        candidate = '{}.{}'.format(backup, index)
        index += 1
    return candidate


_EVENT_FILE_SEQ = itertools.count()


class TFEventWriter(MonitorBase):
    """Writes TensorBoard event files: the graph, and every summary put into the monitors,
    at the trainer's global step.

    Without ``logdir`` and without a logger directory there is nothing to write to:
    constructing it then logs a warning and returns a :class:`NoOpMonitor` instead.

    Args:
        logdir (str): the directory (must exist); defaults to the logger directory.
        max_queue (int): events queued before a write blocks.
        flush_secs (float): flush to disk at least that often (and at each epoch's end).
        split_files (bool): close the event file at each epoch's end and continue in a new one.

    Example::

        logger.set_logger_dir('train_log/run1')
        trainer.train_with_defaults(monitors=[TFEventWriter(), ScalarPrinter()], ...)
    """

    def __new__(cls, logdir=None, max_queue=10, flush_secs=120, split_files=False):
        if logdir is None and logger.get_logger_dir() is None:
            logger.warn("The logger directory was not set and TFEventWriter got no logdir: "
                        "TFEventWriter is replaced by a NoOpMonitor.")
            return NoOpMonitor('TFEventWriter')
        return super().__new__(cls)

    def __init__(self, logdir=None, max_queue=10, flush_secs=120, split_files=False):
        if logdir is None:
            logdir = logger.get_logger_dir()
        if not os.path.isdir(logdir):
            raise ValueError("TFEventWriter: logdir '{}' is not an existing directory.".format(logdir))
        self._logdir = os.path.normpath(logdir)
        self._max_queue = int(max_queue)
        self._flush_secs = flush_secs
        self._split_files = bool(split_files)
        self._writer = None
        self._graph_thread = None

    @property
    def logdir(self):
        return self._logdir

    def _new_writer(self):
        # TensorFlow names event files after the current second only; two writers opened in
        # the same second in one directory (a quick restart, or split_files with short epochs)
        # would truncate each other's file. A per-writer suffix keeps every file distinct.
        suffix = '.{}.{:04d}'.format(os.getpid(), next(_EVENT_FILE_SEQ))
        return tfv1.summary.FileWriter(self._logdir, max_queue=self._max_queue,
                                       flush_secs=self._flush_secs, filename_suffix=suffix)

    def _setup_graph(self):
        self._writer = self._new_writer()

    def _write_graph(self):
        self._writer.add_graph(self.graph)

    def _wait_for_graph(self):
        if self._graph_thread is not None:
            self._graph_thread.join()
            self._graph_thread = None

    def _before_train(self):
        # Serializing a large graph can take a while: do it while the first steps run.
        self._graph_thread = threading.Thread(target=self._write_graph, name='TFEventWriter-graph',
                                              daemon=True)
        self._graph_thread.start()

    def process_summary(self, summary):
        self._writer.add_summary(summary, self.global_step)

    def process_event(self, event):
        self._writer.add_event(event)

    def _trigger(self):
        if self._split_files:
            self._wait_for_graph()  # the graph belongs in the first file
            self._writer.close()
            self._writer = self._new_writer()
        else:
            self._writer.flush()

    def _after_train(self):
        if self._writer is not None:
            self._wait_for_graph()
            self._writer.close()


class JSONWriter(MonitorBase):
    """Keeps the scalars in ``stats.json`` in the logger directory: a list with one dict per
    trigger, holding the scalars put since the previous one plus ``epoch_num`` and
    ``global_step``.

    A record is made at each epoch's end, and after a step when scalars were put during it
    (except the last step of an epoch, whose scalars join the epoch's record). The file is
    replaced atomically, so a crash never leaves a half-written file.

    When resuming (``starting_epoch`` continues the last recorded epoch) the history is
    appended to; otherwise the old file is moved to ``stats.json.<MMDD-HHMMSS>``. An
    unreadable ``stats.json`` is backed up the same way.

    Without a logger directory, constructing it logs a warning and returns a
    :class:`NoOpMonitor`.

    Example::

        JSONWriter.load_existing_json('train_log/run1')
        # [{'val-error': 0.1, 'epoch_num': 1, 'global_step': 100}, ...]
    """

    FILENAME = stats_json.FILENAME

    def __new__(cls):
        if logger.get_logger_dir() is None:
            logger.warn("The logger directory was not set: JSONWriter is replaced by a NoOpMonitor.")
            return NoOpMonitor('JSONWriter')
        return super().__new__(cls)

    def __init__(self):
        self._dir = logger.get_logger_dir()
        self._fname = stats_json.stats_path(self._dir)

    @property
    def filename(self):
        return self._fname

    @staticmethod
    def load_existing_json(dir=None):
        """The list of records in ``dir/stats.json`` (``dir`` defaults to the logger
        directory), or None when there is no such file. Raises ValueError naming the file
        when it is not a JSON list."""
        if dir is None:
            dir = logger.get_logger_dir()
            if dir is None:
                raise ValueError("JSONWriter.load_existing_json(): no dir given and the logger "
                                 "directory is not set.")
        return stats_json.load_records(dir)

    @staticmethod
    def load_existing_epoch_number(dir=None):
        """The ``epoch_num`` of the last record in ``dir/stats.json``, or None when there is
        no file, no record, or the last one has no epoch number."""
        return stats_json.last_epoch(JSONWriter.load_existing_json(dir))

    def _setup_graph(self):
        # Ready before before_train: other callbacks may put scalars in their before_train.
        self._stats = []
        self._stat_now = {}

    def _backup_existing(self, reason):
        backup = _timestamped_backup_name(self._fname)
        shutil.move(self._fname, backup)
        logger.warn("{} Moved it to '{}'; training continues with starting_epoch={} and a new "
                    "history.".format(reason, backup, self.trainer.loop.starting_epoch))
        return backup

    def _before_train(self):
        try:
            stats = self.load_existing_json(self._dir)
        except ValueError as err:
            self._backup_existing("Cannot read the existing {}: {}.".format(self.FILENAME, err))
            stats = None
        if stats is not None:
            starting_epoch = self.trainer.loop.starting_epoch
            last_epoch = stats_json.last_epoch(stats)
            if not stats or (last_epoch is not None and last_epoch + 1 == starting_epoch):
                if stats:
                    logger.info("Found {} with epochs up to {} in {}: appending to it.".format(
                        self.FILENAME, last_epoch, self._dir))
                self._stats = stats
            else:
                self._backup_existing(
                    "The last epoch in '{}' is {}, which does not precede the current "
                    "starting_epoch={}. To resume a training, use AutoResumeTrainConfig or set "
                    "starting_epoch to the epoch after the last finished one.".format(
                        self._fname, last_epoch, starting_epoch))
        self._trigger()  # scalars put before training, if any

    def _trigger_step(self):
        if not self.trainer.loop.is_last_step_of_epoch:
            self._trigger()

    def _trigger_epoch(self):
        self._trigger()

    def process_scalar(self, name, value):
        self._stat_now[name] = value

    def _trigger(self):
        if not self._stat_now:
            return
        self._stat_now['epoch_num'] = self.epoch_num
        self._stat_now['global_step'] = self.global_step
        self._stats.append(self._stat_now)
        self._stat_now = {}
        try:
            self._write_stats()
        except OSError:
            # A disk hiccup must not stop training: the record stays in memory and is
            # written with the next one.
            logger.exception("JSONWriter could not write '{}'; the previous version is kept.".format(
                self._fname))

    def _write_stats(self):
        stats_json.write_records(self._dir, self._stats)


def _compile_regexes(patterns, arg):
    if patterns is None:
        return None
    if isinstance(patterns, (str, bytes)) or not hasattr(patterns, '__iter__'):
        raise TypeError("ScalarPrinter({}=...) takes a list of regular expressions, got {!r}".format(
            arg, patterns))
    compiled = []
    for pattern in patterns:
        try:
            compiled.append(re.compile(pattern))
        except (re.error, TypeError) as err:
            raise ValueError("ScalarPrinter({}=...): bad regular expression {!r}: {}".format(
                arg, pattern, err)) from err
    return compiled


class ScalarPrinter(MonitorBase):
    """Logs the scalars put since the last print as a name/value table, sorted by name.

    Args:
        enable_step (bool): print after every step (the last step of an epoch prints
            together with the epoch unless ``enable_epoch`` is False).
        enable_epoch (bool): print at each epoch's end.
        whitelist (list[str]): regular expressions; when given, only names matching one
            (``re.search``) are printed.
        blacklist (list[str]): regular expressions; names matching one are not printed.

    The rows last printed are in ``last_rows`` as ``(name, value)`` pairs.

    Example::

        ScalarPrinter(whitelist=['^val-'], blacklist=['top5'])
    """

    def __init__(self, enable_step=False, enable_epoch=True, whitelist=None, blacklist=None):
        self._whitelist = _compile_regexes(whitelist, 'whitelist')
        self._blacklist = _compile_regexes(blacklist, 'blacklist') or []
        self._enable_step = bool(enable_step)
        self._enable_epoch = bool(enable_epoch)
        self._pending = {}
        self.last_rows = []

    def _wanted(self, name):
        if self._whitelist is not None and not any(r.search(name) for r in self._whitelist):
            return False
        return not any(r.search(name) for r in self._blacklist)

    def process_scalar(self, name, value):
        self._pending[name] = float(value)

    def _before_train(self):
        self._trigger()

    def _trigger_step(self):
        if not self._enable_step:
            return
        if not self.trainer.loop.is_last_step_of_epoch or not self._enable_epoch:
            self._trigger()

    def _trigger_epoch(self):
        if self._enable_epoch:
            self._trigger()

    def _trigger(self):
        rows = [(name, value) for name, value in sorted(self._pending.items()) if self._wanted(name)]
        self._pending = {}
        if not rows:
            return
        self.last_rows = rows
        table = tabulate([(name, '{:.5g}'.format(value)) for name, value in rows],
                         headers=('name', 'value'), disable_numparse=True,
                         colalign=('left', 'right'))
        logger.info("Statistics:\n" + table)


class SendMonitorData(MonitorBase):
    """Runs a shell command once every scalar in ``names`` has a new value, e.g. to send
    them to a phone or a chat. The values are substituted with ``command.format(**values)``.
    A failing command is logged with its return code; training goes on.

    Args:
        command (str): a shell command with ``{name}`` placeholders.
        names (str or list[str]): the scalars to wait for.

    Example::

        SendMonitorData('curl -s "https://example.com/?err={val-error:.4f}"', ['val-error'])
    """

    def __init__(self, command, names):
        if not isinstance(command, str):
            raise TypeError("SendMonitorData: command must be a str, got {!r}".format(command))
        if isinstance(names, str):
            names = [names]
        names = list(names)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError("SendMonitorData: names must be a non-empty list of scalar names, "
                             "got {!r}".format(names))
        used = {field.split('.')[0].split('[')[0]
                for _, field, _, _ in string.Formatter().parse(command) if field is not None}
        unknown = sorted(used - set(names))
        if unknown:
            raise ValueError("SendMonitorData: command {!r} uses {} which are not in names={}".format(
                command, unknown, names))
        self.command = command
        self.names = names
        self._values = {}
        self.last_returncode = None

    def process_scalar(self, name, value):
        if name in self.names:
            self._values[name] = value

    def _trigger_step(self):
        self._trigger()

    def _trigger(self):
        if any(name not in self._values for name in self.names):
            return
        cmd = self.command.format(**self._values)
        self._values = {}
        ret = subprocess.run(cmd, shell=True).returncode
        self.last_returncode = ret
        if ret != 0:
            logger.error("SendMonitorData: command '{}' failed with return code {}.".format(cmd, ret))


class CometMLMonitor(MonitorBase):
    """Sends the scalars and images put into the monitors, and the graph, to an experiment
    of comet.ml (``comet_ml.Experiment``).

    Scalars are logged at the trainer's global step, images as JPEG named
    ``<name>_step<global step>`` (``_<index>`` appended for each image of a batch); the end
    of every epoch is logged, and the experiment is ended after training.

    comet_ml is needed only to create the experiment here (when ``experiment`` is None); it
    asks to be imported before TensorFlow. Its automatic capture of the terminal output is
    off by default here, because it makes the progress bar look frozen.

    Example::

        import comet_ml   # first
        CometMLMonitor(project_name='mnist', tags=['baseline'])
        # or with an experiment of your own:
        CometMLMonitor(experiment=comet_ml.Experiment(project_name='mnist'))
    """

    def __init__(self, experiment=None, tags=None, **kwargs):
        """
        Args:
            experiment (comet_ml.Experiment): the experiment to send to; ``tags`` and
                ``kwargs`` must then be left out.
            tags (list[str]): tags of the experiment created here.
            kwargs: arguments of ``comet_ml.Experiment`` (project name, API key...).
        """
        if experiment is not None:
            if tags is not None or kwargs:
                raise ValueError("CometMLMonitor: tags and Experiment arguments only apply to an experiment "
                                 "created here; with experiment= given, got tags={!r} and {}".format(
                                     tags, sorted(kwargs)))
            self._exp = experiment
        else:
            comet_ml = import_optional('comet_ml', purpose='CometMLMonitor (without an experiment given)')
            kwargs.setdefault('log_code', True)
            kwargs.setdefault('auto_output_logging', None)
            self._exp = comet_ml.Experiment(**kwargs)
            if tags is not None:
                self._exp.add_tags(list(tags))
        self._exp.log_dependency('tensorpack_lite', __version__)

    @property
    def experiment(self):
        """The ``comet_ml.Experiment`` the data goes to."""
        return self._exp

    def _before_train(self):
        self._exp.set_model_graph(self.graph)

    def process_scalar(self, name, value):
        self._exp.log_metric(name, value, step=self.global_step)

    def process_image(self, name, value):
        self._exp.set_step(self.global_step)
        for index, image in enumerate(value):
            suffix = '_{}'.format(index) if len(value) > 1 else ''
            self._exp.log_image(image, name='{}_step{}{}'.format(name, self.global_step, suffix),
                                image_format='jpeg', image_minmax=(0, 255))

    def _after_epoch(self):
        self._exp.log_epoch_end(self.epoch_num)

    def _after_train(self):
        self._exp.end()
