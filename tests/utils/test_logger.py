"""tensorpack_lite.utils.logger: the logger directory, its actions, and never blocking in CI."""

import builtins
import os
import sys

import pytest

from tensorpack_lite.utils import logger


class _NoTTY(object):
    """A stand-in for sys.stdin that is not a terminal."""

    def isatty(self):
        return False

    def readline(self):  # pragma: no cover - reading would be a bug
        raise AssertionError("stdin was read")


def _no_input(*args, **kwargs):
    pytest.fail("input() was called: set_logger_dir must not prompt without a TTY")


@pytest.fixture(autouse=True)
def _isolated_logger(monkeypatch):
    """No TTY, no env var, no prompting; the process-global logger dir is restored afterwards."""
    monkeypatch.delenv(logger.ACTION_ENV_VAR, raising=False)
    monkeypatch.setattr(sys, 'stdin', _NoTTY())
    monkeypatch.setattr(builtins, 'input', _no_input)
    logger.unset_logger_dir()
    try:
        yield
    finally:
        logger.unset_logger_dir()


def _file_text(path):
    for handler in logger._logger.handlers:
        handler.flush()
    with open(path, encoding='utf-8') as f:
        return f.read()


def _make_old_dir(tmp_path, name='run'):
    d = tmp_path / name
    d.mkdir()
    (d / 'old.txt').write_text('old content')
    return str(d)


def test_set_logger_dir_creates_dir_and_log_file(tmp_path):
    d = str(tmp_path / 'a' / 'b')
    logger.set_logger_dir(d)
    assert os.path.isdir(d)
    assert logger.get_logger_dir() == d
    log_file = os.path.join(d, logger.LOG_FILE_NAME)
    assert os.path.isfile(log_file)
    logger.info('message-in-the-file-1234')
    logger.warn('warning-in-the-file-5678')
    text = _file_text(log_file)
    assert 'message-in-the-file-1234' in text
    assert 'warning-in-the-file-5678' in text
    assert '\x1b[' not in text  # no terminal colours in the file


def test_detach_stops_writing_to_file(tmp_path):
    d = str(tmp_path / 'run')
    logger.set_logger_dir(d)
    logger.unset_logger_dir()
    assert logger.get_logger_dir() is None
    logger.info('after-detach-message')
    with open(os.path.join(d, logger.LOG_FILE_NAME)) as f:
        assert 'after-detach-message' not in f.read()


def test_without_logger_dir_detaches_and_puts_the_same_file_back(tmp_path):
    d = str(tmp_path / 'run')
    logger.set_logger_dir(d)
    logger.info('before-the-block')
    with logger.without_logger_dir():
        assert logger.get_logger_dir() is None and logger.get_logger_url() is None
        logger.info('inside-the-block')
        logger.set_logger_dir(str(tmp_path / 'other'))      # undone at the end of the block
    assert logger.get_logger_dir() == d
    logger.info('after-the-block')
    text = _file_text(os.path.join(d, logger.LOG_FILE_NAME))
    assert 'before-the-block' in text and 'after-the-block' in text and 'inside-the-block' not in text
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME]       # no backup of the log file
    assert 'after-the-block' not in _file_text(str(tmp_path / 'other' / logger.LOG_FILE_NAME))
    with logger.without_logger_dir():       # what the block unsets is put back as well
        logger.unset_logger_dir()
    assert logger.get_logger_dir() == d


def test_empty_existing_dir_needs_no_action(tmp_path):
    d = tmp_path / 'empty'
    d.mkdir()
    (d / '.hidden').write_text('ignored')
    logger.set_logger_dir(str(d))  # no action, no TTY: fine because nothing is there
    assert logger.get_logger_dir() == str(d)


def test_action_keep(tmp_path):
    d = _make_old_dir(tmp_path)
    with open(os.path.join(d, logger.LOG_FILE_NAME), 'w') as f:
        f.write('previous log\n')
    logger.set_logger_dir(d, action='k')
    assert logger.get_logger_dir() == d
    assert open(os.path.join(d, 'old.txt')).read() == 'old content'
    backups = [f for f in os.listdir(d) if f.startswith(logger.LOG_FILE_NAME + '.')]
    assert len(backups) == 1  # the previous log.log was moved aside, not overwritten
    assert open(os.path.join(d, backups[0])).read() == 'previous log\n'
    logger.info('kept-dir-message')
    assert 'kept-dir-message' in _file_text(os.path.join(d, logger.LOG_FILE_NAME))


def test_a_process_of_the_same_job_that_backs_the_log_up_first_is_not_an_error(tmp_path, monkeypatch):
    """Two ranks of a job set the same directory at once (docs/horovod.md): between this process's
    look at the old log.log and its rename, the other process renames it to a backup of its own
    and starts the new log.log. This process goes on without a backup of its own and appends to
    the new file: nothing the other wrote is truncated, the old log is in the other's backup."""
    d = _make_old_dir(tmp_path)
    path = os.path.join(d, logger.LOG_FILE_NAME)
    with open(path, 'w') as f:
        f.write('previous log\n')
    real_rename = os.rename

    def the_other_process_first(src, dst):
        real_rename(src, src + '.other')
        try:
            real_rename(src, dst)           # what this process's rename finds now
        finally:
            with open(src, 'w') as f:
                f.write('the other process started\n')
    with monkeypatch.context() as patch:        # (undo() would also undo the autouse fixture's)
        patch.setattr(os, 'rename', the_other_process_first)
        logger.set_logger_dir(d, action='k')
    logger.info('this process started')
    text = _file_text(path)
    assert text.startswith('the other process started\n') and 'this process started' in text
    assert "backed up" not in text
    assert open(path + '.other').read() == 'previous log\n'
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME, logger.LOG_FILE_NAME + '.other', 'old.txt']


def test_action_delete(tmp_path):
    d = _make_old_dir(tmp_path)
    logger.set_logger_dir(d, action='d')
    assert logger.get_logger_dir() == d
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME]


def test_action_backup(tmp_path):
    d = _make_old_dir(tmp_path)
    logger.set_logger_dir(d, action='b')
    assert logger.get_logger_dir() == d
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME]
    backups = [x for x in os.listdir(str(tmp_path)) if x.startswith('run-')]
    assert len(backups) == 1
    assert (tmp_path / backups[0] / 'old.txt').read_text() == 'old content'


def test_action_backup_twice_in_a_row(tmp_path):
    d = _make_old_dir(tmp_path)
    logger.set_logger_dir(d, action='b')
    logger.info('first-run-message')
    logger.set_logger_dir(d, action='b')  # likely within the same second: distinct backups
    backups = sorted(x for x in os.listdir(str(tmp_path)) if x.startswith('run-'))
    assert len(backups) == 2
    contents = sorted(os.listdir(str(tmp_path / b)) for b in backups)
    assert contents == sorted([['old.txt'], [logger.LOG_FILE_NAME]])


def test_action_new(tmp_path):
    d = _make_old_dir(tmp_path)
    logger.set_logger_dir(d, action='n')
    new = logger.get_logger_dir()
    assert new != d and new.startswith(d + '-')
    assert os.path.isfile(os.path.join(new, logger.LOG_FILE_NAME))
    assert os.listdir(d) == ['old.txt']  # the old directory is untouched
    logger.info('new-dir-message')
    assert 'new-dir-message' in _file_text(os.path.join(new, logger.LOG_FILE_NAME))


def test_action_quit(tmp_path):
    d = _make_old_dir(tmp_path)
    with pytest.raises(OSError):
        logger.set_logger_dir(d, action='q')
    assert os.listdir(d) == ['old.txt']
    assert logger.get_logger_dir() is None


def test_no_action_without_tty_raises_quickly(tmp_path, monkeypatch):
    class _NoTTY(object):
        def isatty(self):
            return False

    d = _make_old_dir(tmp_path)
    monkeypatch.delenv(logger.ACTION_ENV_VAR, raising=False)
    monkeypatch.setattr(sys, 'stdin', _NoTTY())
    monkeypatch.setattr(builtins, 'input', lambda prompt='': pytest.fail('prompted: ' + prompt))
    with pytest.raises(RuntimeError) as excinfo:  # at once: no prompt that would wait for an answer
        logger.set_logger_dir(d)
    msg = str(excinfo.value)
    assert 'TENSORPACK_LOGGER_ACTION' in msg and d in msg
    assert os.listdir(d) == ['old.txt']
    assert logger.get_logger_dir() is None


def test_no_action_with_tty_prompts(tmp_path, monkeypatch):
    class _TTY(object):
        def isatty(self):
            return True

    d = _make_old_dir(tmp_path)
    prompts = []
    monkeypatch.setattr(sys, 'stdin', _TTY())
    monkeypatch.setattr(builtins, 'input', lambda prompt='': prompts.append(prompt) or ' D ')
    logger.set_logger_dir(d)
    assert len(prompts) == 1
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME]  # 'd' was chosen


def test_env_var_action_is_honoured(tmp_path, monkeypatch):
    d = _make_old_dir(tmp_path)
    monkeypatch.setenv(logger.ACTION_ENV_VAR, 'k')
    logger.set_logger_dir(d)
    assert logger.get_logger_dir() == d
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME, 'old.txt']


def test_explicit_action_beats_env_var(tmp_path, monkeypatch):
    d = _make_old_dir(tmp_path)
    monkeypatch.setenv(logger.ACTION_ENV_VAR, 'q')
    logger.set_logger_dir(d, action='d')
    assert sorted(os.listdir(d)) == [logger.LOG_FILE_NAME]


def test_unknown_action_is_value_error(tmp_path, monkeypatch):
    d = _make_old_dir(tmp_path)
    with pytest.raises(ValueError, match="Unknown logger directory action 'x'"):
        logger.set_logger_dir(d, action='x')
    assert os.listdir(d) == ['old.txt']
    with pytest.raises(ValueError):  # rejected even when the directory does not exist yet
        logger.set_logger_dir(str(tmp_path / 'fresh'), action='keep')
    assert not os.path.exists(str(tmp_path / 'fresh'))
    monkeypatch.setenv(logger.ACTION_ENV_VAR, 'z')
    with pytest.raises(ValueError):
        logger.set_logger_dir(d)


def test_auto_set_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    logger.auto_set_dir(action='k')
    d = logger.get_logger_dir()
    assert d.startswith('train_log' + os.sep)
    assert os.path.isfile(os.path.join(str(tmp_path), d, logger.LOG_FILE_NAME))
    logger.auto_set_dir(action='k', name='exp1')
    assert logger.get_logger_dir() == d + ':exp1'
    assert os.path.isdir(os.path.join(str(tmp_path), d + ':exp1'))


def test_auto_set_dir_uses_main_script_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    main = sys.modules['__main__']
    monkeypatch.setattr(main, '__file__', '/somewhere/train-mnist.py', raising=False)
    logger.auto_set_dir(action='d')
    assert logger.get_logger_dir() == os.path.join('train_log', 'train-mnist')
