"""The monitors that keep the statistics of a run: TensorBoard event files
(:class:`TFEventWriter`), ``stats.json`` (:class:`JSONWriter`) and a table printed after each
epoch (:class:`ScalarPrinter`)."""

import itertools
import os
import re
import shutil
import threading
from datetime import datetime

from tabulate import tabulate

from ..compat import tfv1
from ..utils import logger, stats_json
from .monitor_group import MonitorBase, NoOpMonitor

__all__ = ['TFEventWriter', 'JSONWriter', 'ScalarPrinter']


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
