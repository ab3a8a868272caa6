"""The monitors that keep the statistics of a run: TensorBoard event files
(:class:`TFEventWriter`), ``stats.json`` (:class:`JSONWriter`) and a table printed after each
epoch (:class:`ScalarPrinter`)."""

import itertools
import json
import os
import re
import shutil
import threading

from tabulate import tabulate

from ...compat import tfv1
from ...utils import logger, stats_json
from ...utils.fs import write_atomically
from .group import MonitorBase, NoOpMonitor

__all__ = ['TFEventWriter', 'JSONWriter', 'ScalarPrinter', 'event_file_suffix']


_EVENT_FILE_SEQ = itertools.count()


def event_file_suffix():
    """A suffix for the name of a new event file of this process, ``.<pid>.<number>``: the numbers
    grow with each file made (by any monitor), so that files made in the same second sort, as
    TensorBoard reads them, in the order they were made. TensorFlow names event files after the
    current second only: without it, two writers opened in the same second in one directory would
    truncate each other's file."""
    return '.{}.{:04d}'.format(os.getpid(), next(_EVENT_FILE_SEQ))


class TFEventWriter(MonitorBase):
    """Writes TensorBoard event files: the graph, and every summary put into the monitors,
    at the trainer's global step.

    A scalar gets one point per global step: when several values of one name are put at the
    same step (e.g. a model's ``tf.summary.scalar('learning_rate', ...)`` and a
    :class:`HyperParamSetter`), the last one is written, as in ``stats.json``. Scalars are
    therefore written when the step moves on, at each epoch's end, and when training ends.

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
        self._pending_scalars = {}   # tag -> Summary.Value, all put at self._pending_step
        self._pending_step = None

    @property
    def logdir(self):
        return self._logdir

    def _new_writer(self):
        return tfv1.summary.FileWriter(self._logdir, max_queue=self._max_queue,
                                       flush_secs=self._flush_secs, filename_suffix=event_file_suffix())

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
        step = self.global_step
        if step != self._pending_step:
            self._write_pending_scalars()
            self._pending_step = step
        others = tfv1.Summary()
        for value in summary.value:
            if value.WhichOneof('value') == 'simple_value':
                self._pending_scalars[value.tag] = tfv1.Summary.Value()
                self._pending_scalars[value.tag].CopyFrom(value)
            else:
                others.value.add().CopyFrom(value)
        if others.value:
            self._writer.add_summary(others, step)

    def _write_pending_scalars(self):
        if self._pending_scalars:
            summary = tfv1.Summary(value=list(self._pending_scalars.values()))
            self._writer.add_summary(summary, self._pending_step)
            self._pending_scalars = {}

    def process_event(self, event):
        self._writer.add_event(event)

    def _trigger(self):
        self._write_pending_scalars()
        if self._split_files:
            self._wait_for_graph()  # the graph belongs in the first file
            self._writer.close()
            self._writer = self._new_writer()
        else:
            self._writer.flush()

    def _after_train(self):
        if self._writer is not None:
            self._write_pending_scalars()
            self._wait_for_graph()
            self._writer.close()


class JSONWriter(MonitorBase):
    """Keeps the scalars in ``stats.json`` in the logger directory: a list of dicts holding the
    scalars put since the previous one plus ``epoch_num`` and ``global_step``; at an epoch's end
    also the size of the run that trained it: the trainer's ``world_size`` (model replicas),
    ``steps_per_epoch`` and ``global_batch`` (when measured). The ``steps_per_epoch`` key marks
    the record as an epoch's end (see :mod:`~tensorpack_lite.utils.stats_json`).

    A record is made at each epoch's end (even without scalars: the record says the epoch
    finished), and after a step when scalars were put during it (except the last step of an
    epoch, whose scalars join the epoch's record).

    The file is written before training (an empty list in a new run, so that "no epoch
    finished yet" differs from "no JSONWriter"), at each epoch's end, and after training
    (also when it fails) if records are waiting. Records made mid-epoch wait in memory until
    then, so a scalar put every step costs no write. Each write replaces the file atomically,
    so a crash never leaves a half-written file; the ``stats.json.<hex>.tmp`` files of writes
    interrupted by a kill are removed before training.

    When resuming, the history is appended to: the records of epochs from ``starting_epoch``
    on (left by an interrupted attempt at them) are moved to ``stats.json.<MMDD-HHMMSS>``.
    When the history does not end with the epoch before ``starting_epoch`` (or cannot be
    read), the whole file is moved there and a new history starts.

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
        self._unwritten = False
        self._restored = []

    def _get_state(self):
        """The records of the epoch in progress (written to the file only at its end), with the
        scalars put in the current step as its record: what a run resumed in this epoch must not
        lose."""
        ends = [i for i, r in enumerate(self._stats) if 'steps_per_epoch' in r]
        records = list(self._stats[ends[-1] + 1 if ends else 0:])
        if self._stat_now:
            records.append(dict(self._stat_now, epoch_num=self.epoch_num, global_step=self.global_step))
        return {'records': records}

    def _set_state(self, state):
        self._restored = list(state['records'])

    def _before_train(self):
        for path in stats_json.remove_stale_temporaries(self._dir):
            logger.info("Removed '{}', left by an interrupted write.".format(path))
        self._stats = self._history_to_continue()
        self._record()  # scalars put before training, if any
        self._write()

    def _history_to_continue(self):
        """The records of the existing file that this run continues (see the class doc)."""
        try:
            stats = self.load_existing_json(self._dir)
        except ValueError as err:
            self._set_aside_file("Cannot read the existing {}: {}.".format(self.FILENAME, err))
            return []
        if stats is None:
            return []
        loop = self.trainer.loop
        starting_epoch = loop.starting_epoch
        resumed_at = loop.global_step if loop.schedule.first_step else None   # in mid-epoch
        kept = [r for r in stats if _continues(r, starting_epoch, resumed_at)]
        ends = [r for r in kept if stats_json.epoch_of(r) != starting_epoch]
        if ends and stats_json.last_epoch(ends) != starting_epoch - 1:
            self._set_aside_file(
                "The last epoch in '{}' before starting_epoch={} is {}, which does not precede "
                "it. To resume a training, use AutoResumeTrainConfig or set starting_epoch to the "
                "epoch after the last finished one.".format(
                    self._fname, starting_epoch, stats_json.last_epoch(kept)))
            return []
        later = [r for r in stats if not _continues(r, starting_epoch, resumed_at)]
        if resumed_at is not None:   # the epoch's records that were only in memory when it stopped
            last = max([r.get('global_step', -1) for r in kept if stats_json.epoch_of(r) == starting_epoch],
                       default=-1)
            kept += [r for r in self._restored if last < r.get('global_step', -1) <= resumed_at]
        if later:
            backup = stats_json.backup_path(self._dir)
            write_atomically(backup, lambda f: json.dump(later, f), mode='w')
            logger.warn("{} holds {} record(s) of epoch {} or later, from an interrupted attempt at "
                        "them: moved them to '{}' (training continues with starting_epoch={}).".format(
                            self._fname, len(later), starting_epoch, backup, starting_epoch))
        if kept:
            logger.info("Found {} with epochs up to {} in {}: appending to it.".format(
                self.FILENAME, starting_epoch - 1, self._dir))
        return kept

    def _set_aside_file(self, reason):
        backup = stats_json.backup_path(self._dir)
        shutil.move(self._fname, backup)
        logger.warn("{} Moved it to '{}'; training continues with starting_epoch={} and a new "
                    "history.".format(reason, backup, self.trainer.loop.starting_epoch))

    def _trigger_step(self):
        if self._stat_now and not self.trainer.loop.is_last_step_of_epoch:
            self._record()

    def _trigger_epoch(self):
        self._record(epoch_end=True)
        self._write()

    def _after_train(self):
        self._record()
        if self._unwritten:
            self._write()

    def process_scalar(self, name, value):
        self._stat_now[name] = value

    def _trigger(self):
        self._record()
        self._write()

    def _record(self, epoch_end=False):
        """Turn the scalars put since the last record into a record (in memory); at an epoch's
        end, even when there are none."""
        if not self._stat_now and not epoch_end:
            return
        self._stat_now['epoch_num'] = self.epoch_num
        self._stat_now['global_step'] = self.global_step
        if epoch_end:
            self._stat_now.update(self._run_shape())
        self._stats.append(self._stat_now)
        self._stat_now = {}
        self._unwritten = True

    def _run_shape(self):
        """What an epoch-end record says of the run: ``world_size``, ``steps_per_epoch`` and,
        when the trainer measured it, ``global_batch``."""
        shape = {'world_size': self.trainer.world_size, 'steps_per_epoch': self.trainer.steps_per_epoch}
        if self.trainer.global_batch is not None:
            shape['global_batch'] = self.trainer.global_batch
        return shape

    def _write(self):
        try:
            stats_json.write_records(self._dir, self._stats)
        except OSError:
            # A disk hiccup must not stop training: the records stay in memory and are
            # written with the next ones.
            logger.exception("JSONWriter could not write '{}'; the previous version is kept.".format(
                self._fname))
        else:
            self._unwritten = False


def _continues(record, epoch, resumed_at):
    """Whether a run starting at ``epoch`` keeps ``record``: made before that epoch, or in it up
    to global step ``resumed_at`` when the run resumes there in the middle of it (None: not)."""
    record_epoch = stats_json.epoch_of(record)
    if record_epoch is None or record_epoch < epoch:
        return True
    return (resumed_at is not None and record_epoch == epoch
            and record.get('global_step', resumed_at + 1) <= resumed_at)


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
