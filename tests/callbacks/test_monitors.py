"""Tests of the monitors that write training statistics: TFEventWriter, JSONWriter,
ScalarPrinter, SendMonitorData, and the Monitors hub they are fed through."""

import glob
import json
import logging
import os
import re

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.monitor import (JSONWriter, NoOpMonitor, ScalarPrinter,
                                               SendMonitorData, TFEventWriter)
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.tfutils.summary import create_scalar_summary
from tensorpack_lite.train.base import Trainer
from tensorpack_lite.utils import logger, stats_json

STEPS = 3


def _train(callbacks, monitors, starting_epoch=1, max_epoch=2, steps_per_epoch=STEPS):
    """Train a one-variable model in a fresh graph; returns the trainer."""
    with tfv1.Graph().as_default():
        w = tfv1.get_variable('w', initializer=0.0)
        loss = tf.square(w - 3.0, name='loss')
        trainer = Trainer()
        trainer.train_op = tfv1.train.GradientDescentOptimizer(0.1).minimize(loss)
        trainer.train(callbacks, monitors, NewSessionCreator(), JustCurrentSession(),
                      steps_per_epoch, starting_epoch, max_epoch)
    return trainer


class PutEpochStats(Callback):
    """Puts 'metric' = epoch * 1.5 as a scalar and 'summ' = epoch * 10 through a Summary."""

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar('metric', self.epoch_num * 1.5)
        summary = tfv1.Summary()
        summary.value.add(tag='tower0/summ-summary', simple_value=self.epoch_num * 10.0)
        self.trainer.monitors.put_summary(summary)


def _events(logdir):
    events = []
    for fname in sorted(glob.glob(os.path.join(logdir, 'events.out.tfevents.*'))):
        events.extend(tfv1.train.summary_iterator(fname))
    return events


def _scalar_events(events, tag):
    return [(e.step, v.simple_value) for e in events for v in e.summary.value if v.tag == tag]


def _load_stats(logdir):
    with open(os.path.join(logdir, 'stats.json')) as f:
        return json.load(f)


# ----------------------------------------------------------------------- JSONWriter + events


def test_stats_json_and_event_files(logdir):
    _train([PutEpochStats()], [TFEventWriter(), JSONWriter()], max_epoch=2)

    assert _load_stats(logdir) == [
        {'metric': 1.5, 'summ': 10.0, 'epoch_num': 1, 'global_step': 3, 'world_size': 1,
         'steps_per_epoch': 3},
        {'metric': 3.0, 'summ': 20.0, 'epoch_num': 2, 'global_step': 6, 'world_size': 1,
         'steps_per_epoch': 3},
    ]
    assert JSONWriter.load_existing_epoch_number(logdir) == 2
    assert JSONWriter.load_existing_json() == _load_stats(logdir)  # defaults to the logger dir

    events = _events(logdir)
    assert _scalar_events(events, 'metric') == [(3, 1.5), (6, 3.0)]
    assert _scalar_events(events, 'summ') == [(3, 10.0), (6, 20.0)]  # tower prefix/suffix gone
    graph_events = [e for e in events if e.HasField('graph_def')]
    assert len(graph_events) == 1
    graph_def = tfv1.GraphDef.FromString(graph_events[0].graph_def)
    assert {'w', 'loss', 'global_step'} <= {node.name for node in graph_def.node}


def test_json_records_mid_epoch_scalars_but_not_at_the_last_step(logdir):
    class PerStep(Callback):
        def _trigger_step(self):
            self.trainer.monitors.put_scalar('step-x', self.global_step)

    _train([PerStep(), PutEpochStats()], [JSONWriter()], max_epoch=1)
    stats = _load_stats(logdir)
    # Steps 0 and 1 make their own records; the last step's value joins the epoch's record.
    assert [(r['global_step'], r['epoch_num']) for r in stats] == [(1, 1), (2, 1), (3, 1)]
    assert [r['step-x'] for r in stats] == [1, 2, 3]
    assert 'metric' not in stats[0] and stats[2]['metric'] == 1.5


def test_json_resume_appends_and_mismatch_backs_up(logdir, log_records):
    _train([PutEpochStats()], [TFEventWriter(), JSONWriter()], starting_epoch=1, max_epoch=2)
    _train([PutEpochStats()], [TFEventWriter(), JSONWriter()], starting_epoch=3, max_epoch=4)
    stats = _load_stats(logdir)
    assert [r['epoch_num'] for r in stats] == [1, 2, 3, 4]
    assert [r['metric'] for r in stats] == [1.5, 3.0, 4.5, 6.0]
    # Both runs kept their own event file, although they started within the same second.
    assert sorted(v for _, v in _scalar_events(_events(logdir), 'metric')) == [1.5, 3.0, 4.5, 6.0]
    assert not log_records.messages(logging.WARNING)

    _train([PutEpochStats()], [JSONWriter()], starting_epoch=6, max_epoch=6)
    assert [r['epoch_num'] for r in _load_stats(logdir)] == [6]
    backups = glob.glob(os.path.join(logdir, 'stats.json.*'))
    assert len(backups) == 1
    with open(backups[0]) as f:
        assert [r['epoch_num'] for r in json.load(f)] == [1, 2, 3, 4]
    warnings = log_records.messages_at(logging.WARNING)
    assert any('starting_epoch=6' in msg and 'AutoResumeTrainConfig' in msg for msg in warnings)


def test_json_corrupt_file_is_backed_up(logdir, log_records):
    path = os.path.join(logdir, 'stats.json')
    with open(path, 'w') as f:
        f.write('[{"metric": 1.5, "epo')
    with pytest.raises(ValueError, match='stats.json'):
        JSONWriter.load_existing_json(logdir)

    _train([PutEpochStats()], [JSONWriter()], max_epoch=1)
    assert [r['epoch_num'] for r in _load_stats(logdir)] == [1]
    backups = glob.glob(path + '.*')
    assert len(backups) == 1
    with open(backups[0]) as f:
        assert f.read() == '[{"metric": 1.5, "epo'
    assert any('Cannot read' in msg for msg in log_records.messages_at(logging.WARNING))


def test_json_load_helpers_without_file_or_epoch(tmp_path):
    assert JSONWriter.load_existing_json(str(tmp_path)) is None
    assert JSONWriter.load_existing_epoch_number(str(tmp_path)) is None
    (tmp_path / 'stats.json').write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match='list'):
        JSONWriter.load_existing_json(str(tmp_path))
    (tmp_path / 'stats.json').write_text('[]')
    assert JSONWriter.load_existing_epoch_number(str(tmp_path)) is None


def test_json_crash_while_writing_keeps_previous_file(logdir, monkeypatch):
    real_dump = json.dump
    calls, on_disk_after_crash = [], []

    def dump_then_crash(obj, f, *args, **kwargs):
        calls.append(len(obj))
        if len(calls) == 3:  # the write at the end of epoch 2 dies half-way (the first is `[]`)
            f.write('[{"metric": 1.5, ')
            f.flush()
            raise RuntimeError('simulated crash while writing')
        if len(calls) == 4:  # after_train writes the waiting records again
            on_disk_after_crash.append(_load_stats(logdir))
        return real_dump(obj, f, *args, **kwargs)

    monkeypatch.setattr(json, 'dump', dump_then_crash)
    with pytest.raises(RuntimeError, match='simulated crash'):
        _train([PutEpochStats()], [JSONWriter()], max_epoch=3)
    monkeypatch.undo()

    assert calls == [0, 1, 2, 2]
    epoch1 = {'metric': 1.5, 'summ': 10.0, 'epoch_num': 1, 'global_step': 3, 'world_size': 1,
              'steps_per_epoch': 3}
    assert on_disk_after_crash == [[epoch1]]   # the half-written file never replaced it
    epoch2 = {'metric': 3.0, 'summ': 20.0, 'epoch_num': 2, 'global_step': 6, 'world_size': 1,
              'steps_per_epoch': 3}
    assert _load_stats(logdir) == [epoch1, epoch2]
    assert glob.glob(os.path.join(logdir, '*.tmp')) == []


def test_json_failed_rename_is_logged_and_retried(logdir, monkeypatch, log_records):
    real_replace = os.replace
    calls = []

    def flaky_replace(src, dst, *args, **kwargs):
        if str(dst).endswith('stats.json'):
            calls.append(dst)
            if len(calls) == 3:  # the write at the end of epoch 2 (the first is before training)
                # At this moment the file on disk must still be the previous good version.
                assert len(_load_stats(logdir)) == 1
                raise OSError(28, 'No space left on device (simulated)')
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, 'replace', flaky_replace)
    _train([PutEpochStats()], [JSONWriter()], max_epoch=3)
    monkeypatch.undo()

    assert len(calls) == 4
    # The epoch-2 record was kept in memory and written with epoch 3.
    assert [r['epoch_num'] for r in _load_stats(logdir)] == [1, 2, 3]
    assert glob.glob(os.path.join(logdir, '*.tmp')) == []
    assert any('could not write' in msg for msg in log_records.messages_at(logging.ERROR))


class PutEveryStep(Callback):
    """Puts 'step-x' = global_step after every step."""

    def _trigger_step(self):
        self.trainer.monitors.put_scalar('step-x', self.global_step)


def test_json_per_step_scalars_cost_one_write_per_epoch(logdir, monkeypatch):
    """A scalar put every step is buffered: 300 steps in 3 epochs make at most epochs + 2
    writes (before training, each epoch's end, after training), and every record is kept."""
    written = []
    real_write = stats_json.write_records

    def counting_write(directory, records):
        written.append(len(records))
        return real_write(directory, records)

    monkeypatch.setattr(stats_json, 'write_records', counting_write)
    _train([PutEveryStep()], [JSONWriter()], max_epoch=3, steps_per_epoch=100)

    assert len(written) <= 3 + 2
    assert written == [0, 100, 200, 300]   # [] before training, then at each epoch's end
    stats = _load_stats(logdir)
    assert [r['step-x'] for r in stats] == list(range(1, 301))
    assert [r['global_step'] for r in stats] == list(range(1, 301))
    assert [r['epoch_num'] for r in stats] == [(step - 1) // 100 + 1 for step in range(1, 301)]


def test_json_new_run_writes_an_empty_list_before_training(logdir):
    class Look(Callback):
        def _before_train(self):
            self.seen = None

        def _trigger_step(self):
            if self.seen is None:
                self.seen = _load_stats(logdir)

    look = Look()
    _train([look], [JSONWriter()], max_epoch=1)
    assert look.seen == []   # the run exists and has finished no epoch yet
    # An epoch without any scalar is still recorded: the record says that it finished.
    assert _load_stats(logdir) == [{'epoch_num': 1, 'global_step': 3, 'world_size': 1,
                                    'steps_per_epoch': 3}]


def test_json_failure_writes_the_waiting_records(logdir):
    class FailAtStep5(Callback):
        def _trigger_step(self):
            if self.global_step == 5:
                raise RuntimeError('failure at step 5')

    with pytest.raises(RuntimeError, match='step 5'):
        _train([PutEveryStep(), FailAtStep5()], [JSONWriter()], max_epoch=3)
    stats = _load_stats(logdir)
    assert [(r['epoch_num'], r['global_step'], r['step-x']) for r in stats] == [
        (1, 1, 1), (1, 2, 2), (1, 3, 3), (2, 4, 4), (2, 5, 5)]


def test_json_removes_stale_temporary_files_only(logdir, log_records):
    stale = [os.path.join(logdir, 'stats.json.{}.tmp'.format(h)) for h in ('0123456789ab', 'ff00')]
    kept = [os.path.join(logdir, name) for name in
            ('stats.json.0123-120000', 'model.data.0123456789ab.tmp', 'stats.json.xyz.tmp')]
    for path in stale + kept:
        with open(path, 'w') as f:
            f.write('[')
    _train([PutEpochStats()], [JSONWriter()], max_epoch=1)
    assert not any(os.path.exists(path) for path in stale)
    assert all(os.path.exists(path) for path in kept)
    infos = log_records.messages_at(logging.INFO)
    assert all(any(path in msg for msg in infos) for path in stale)


def test_json_resume_moves_records_of_later_epochs_to_a_backup(logdir, log_records):
    """Records of the starting epoch and later (an interrupted attempt at them: a mid-epoch
    validation, an epoch whose checkpoint failed) are set aside; the history goes on."""
    earlier = [{'metric': 1.5, 'epoch_num': 1, 'global_step': 3},
               {'val': 0.5, 'epoch_num': 2, 'global_step': 4},
               {'metric': 3.0, 'epoch_num': 2, 'global_step': 6}]
    later = [{'val': 0.7, 'epoch_num': 3, 'global_step': 7},
             {'metric': 4.5, 'epoch_num': 3, 'global_step': 9},
             {'val': 0.9, 'epoch_num': 4, 'global_step': 10}]
    with open(os.path.join(logdir, 'stats.json'), 'w') as f:
        json.dump(earlier + later, f)

    _train([PutEpochStats()], [JSONWriter()], starting_epoch=3, max_epoch=3)

    assert _load_stats(logdir) == earlier + [
        {'metric': 4.5, 'summ': 30.0, 'epoch_num': 3, 'global_step': 3, 'world_size': 1,
         'steps_per_epoch': 3}]
    backups = glob.glob(os.path.join(logdir, 'stats.json.*'))
    assert len(backups) == 1 and re.search(r'stats\.json\.\d{4}-\d{6}$', backups[0])
    with open(backups[0]) as f:
        assert json.load(f) == later
    warnings = log_records.messages_at(logging.WARNING)
    assert any('3 record(s) of epoch 3 or later' in msg and backups[0] in msg for msg in warnings)


# ----------------------------------------------------------------------- TFEventWriter


def test_put_image_event_and_numpy_scalars(logdir):
    images = np.random.RandomState(0).randint(0, 256, size=(2, 4, 5, 3)).astype(np.uint8)
    seen = {}

    class PutThings(Callback):
        def _trigger_epoch(self):
            monitors = self.trainer.monitors
            monitors.put_image('img', images)
            monitors.put_event(tfv1.Event(summary=create_scalar_summary('evt', 7.0)))
            monitors.put_scalar('np-f', np.float32(0.25) * self.epoch_num)
            monitors.put_scalar('np-i', np.int64(7))
            monitors.put_scalar('np-a', np.array([1.5]))

        def _after_train(self):
            monitors = self.trainer.monitors
            seen['latest'] = monitors.get_latest('np-i')
            seen['history'] = list(monitors.get_history('np-f'))
            with pytest.raises(KeyError, match='never-put'):
                monitors.get_latest('never-put')

    _train([PutThings()], [TFEventWriter(), JSONWriter()], max_epoch=2)

    stats = _load_stats(logdir)
    assert [(r['np-f'], r['np-i'], r['np-a']) for r in stats] == [(0.25, 7, 1.5), (0.5, 7, 1.5)]
    assert all(type(r['np-i']) is int for r in stats)
    assert seen['latest'] == 7.0  # the history keeps floats, as tensorpack
    assert seen['history'] == [(3, 0.25), (6, 0.5)]

    events = _events(logdir)
    assert _scalar_events(events, 'evt') == [(3, 7.0), (6, 7.0)]
    image_values = [(e.step, v) for e in events for v in e.summary.value if v.HasField('image')]
    assert sorted((step, v.tag) for step, v in image_values) == [
        (3, 'img/0'), (3, 'img/1'), (6, 'img/0'), (6, 'img/1')]
    first = next(v.image for step, v in image_values if v.tag == 'img/1')
    assert (first.height, first.width, first.colorspace) == (4, 5, 3)
    with tfv1.Graph().as_default(), tfv1.Session() as sess:
        decoded = sess.run(tf.io.decode_png(first.encoded_image_string))
    np.testing.assert_array_equal(decoded, images[1])


def test_event_writer_split_files_keeps_every_epoch(logdir):
    _train([PutEpochStats()], [TFEventWriter(split_files=True)], max_epoch=3)
    files = sorted(glob.glob(os.path.join(logdir, 'events.out.tfevents.*')))
    assert len(files) == 4  # one per epoch, plus the one after the last epoch's end
    per_file = [_scalar_events(list(tfv1.train.summary_iterator(f)), 'metric') for f in files]
    assert sorted(per_file) == [[], [(3, 1.5)], [(6, 3.0)], [(9, 4.5)]]
    assert len([e for e in _events(logdir) if e.HasField('graph_def')]) == 1


def test_no_logger_dir_gives_noop_monitors(tmp_path, monkeypatch, log_records):
    assert logger.get_logger_dir() is None
    monkeypatch.chdir(tmp_path)
    event_writer, json_writer = TFEventWriter(), JSONWriter()
    assert isinstance(event_writer, NoOpMonitor) and not isinstance(event_writer, TFEventWriter)
    assert isinstance(json_writer, NoOpMonitor)
    assert str(event_writer) == 'NoOpMonitor(TFEventWriter)'
    warnings = log_records.messages_at(logging.WARNING)
    assert len(warnings) == 2
    assert 'TFEventWriter' in warnings[0] and 'JSONWriter' in warnings[1]

    _train([PutEpochStats()], [event_writer, json_writer], max_epoch=1)
    assert os.listdir(str(tmp_path)) == []


def test_event_writer_with_explicit_logdir(tmp_path):
    assert logger.get_logger_dir() is None
    writer = TFEventWriter(logdir=str(tmp_path), flush_secs=5)
    assert isinstance(writer, TFEventWriter)
    _train([PutEpochStats()], [writer], max_epoch=1)
    assert _scalar_events(_events(str(tmp_path)), 'metric') == [(3, 1.5)]
    with pytest.raises(ValueError, match='no-such-dir'):
        TFEventWriter(logdir=str(tmp_path / 'no-such-dir'))


# ----------------------------------------------------------------------- ScalarPrinter


class RecordingPrinter(ScalarPrinter):
    """Remembers (global_step, rows) of every print."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.printed = []

    def _trigger(self):
        before = self.last_rows
        super()._trigger()
        if self.last_rows is not before:
            self.printed.append((self.global_step, self.last_rows))


class PutMany(Callback):
    def _before_train(self):
        self.trainer.monitors.put_scalar('init-value', 42)

    def _trigger_epoch(self):
        m = self.trainer.monitors
        m.put_scalar('val-error', self.epoch_num / 3.0)
        m.put_scalar('val-top5', 0.5)
        m.put_scalar('train-loss', 123456.789)
        m.put_scalar('loss', 2.0 * self.epoch_num)
        m.put_scalar('zz-other', 9.0)


def test_scalar_printer_table_with_whitelist_and_blacklist(logdir):
    printer = RecordingPrinter(whitelist=['^val-', 'loss'], blacklist=['top5'])
    _train([PutMany()], [printer], max_epoch=2)
    assert printer.printed == [
        (3, [('loss', 2.0), ('train-loss', 123456.789), ('val-error', 1 / 3.0)]),
        (6, [('loss', 4.0), ('train-loss', 123456.789), ('val-error', 2 / 3.0)]),
    ]  # 'init-value' is not whitelisted: nothing printed before training
    assert printer.last_rows == printer.printed[-1][1]

    with open(os.path.join(logdir, 'log.log')) as f:
        log = f.read()
    lines = [line.split() for line in log.splitlines()]
    assert ['name', 'value'] in lines
    assert ['val-error', '0.33333'] in lines and ['val-error', '0.66667'] in lines
    assert ['train-loss', '1.2346e+05'] in lines
    assert 'val-top5' not in log and 'zz-other' not in log and 'init-value' not in log


def test_scalar_printer_prints_before_train_and_per_step(logdir):
    class PerStep(Callback):
        def _trigger_step(self):
            self.trainer.monitors.put_scalar('step-x', self.global_step)

    both = RecordingPrinter(enable_step=True, blacklist=['^val', 'loss', 'zz'])
    epoch_only = RecordingPrinter(blacklist=['^val', 'loss', 'zz'])
    step_only = RecordingPrinter(enable_step=True, enable_epoch=False, blacklist=['^val', 'loss', 'zz'])
    _train([PutMany(), PerStep()], [both, epoch_only, step_only], max_epoch=1)

    before = (0, [('init-value', 42.0)])
    assert both.printed == [before, (1, [('step-x', 1.0)]), (2, [('step-x', 2.0)]),
                            (3, [('step-x', 3.0)])]
    assert epoch_only.printed == [before, (3, [('step-x', 3.0)])]
    assert step_only.printed == [before, (1, [('step-x', 1.0)]), (2, [('step-x', 2.0)]),
                                 (3, [('step-x', 3.0)])]


def test_scalar_printer_bad_arguments():
    with pytest.raises(TypeError, match='whitelist'):
        ScalarPrinter(whitelist='^val')
    with pytest.raises(ValueError, match=r"blacklist.*'\('"):
        ScalarPrinter(blacklist=['('])


# ----------------------------------------------------------------------- SendMonitorData


def test_send_monitor_data_runs_shell_command(logdir, tmp_path, log_records):
    out = tmp_path / 'sent.txt'
    command = "echo {metric:.2f} {val-error} >> '" + str(out) + "'"

    class PutValError(Callback):
        def _trigger_epoch(self):
            if self.epoch_num == 2:
                self.trainer.monitors.put_scalar('val-error', 0.25)

    sender = SendMonitorData(command, ['metric', 'val-error'])
    failing = SendMonitorData('exit 3', 'metric')
    _train([PutEpochStats(), PutValError()], [sender, failing], max_epoch=3)

    # Epoch 1 lacks val-error; epoch 2 has both; epoch 3 lacks a new val-error.
    assert out.read_text() == '3.00 0.25\n'
    assert failing.last_returncode == 3
    errors = log_records.messages_at(logging.ERROR)
    assert len(errors) == 3 and all("'exit 3'" in msg and 'return code 3' in msg for msg in errors)


def test_send_monitor_data_bad_arguments():
    with pytest.raises(ValueError, match='loss'):
        SendMonitorData('echo {loss}', ['metric'])
    with pytest.raises(ValueError, match='names'):
        SendMonitorData('echo {}', ['metric'])
    with pytest.raises(TypeError, match='command'):
        SendMonitorData(['echo'], ['metric'])


def test_the_statistics_of_records_leave_out_the_position_and_the_run_shape():
    records = [{'cost': 2.0, 'epoch_num': 1, 'global_step': 3},
               {'cost': 1.5, 'val-error': 0.25, 'epoch_num': 1, 'global_step': 4, 'world_size': 2,
                'steps_per_epoch': 4, 'global_batch': 16},
               {'cost': 1.0, 'epoch_num': 2, 'global_step': 8, 'world_size': 2, 'steps_per_epoch': 4}]
    assert stats_json.scalars_of(records[1]) == {'cost': 1.5, 'val-error': 0.25}
    assert stats_json.scalar_history(records) == {'cost': [(3, 2.0), (4, 1.5), (8, 1.0)],
                                                  'val-error': [(4, 0.25)]}
