"""Checkpoints on object storage (issue 58 item 6) against a real S3 server: moto's server mode,
started once on a free port of localhost, stopped at the end. A run whose logger directory is
``s3://bucket/<run>`` (tests/resume_scripts/remote_resume.py: the digits MLP, a checkpoint every 2
steps, ModelSaver(max_to_keep=2), AutoResumeTrainConfig) writes its checkpoints to the bucket and
rotates them there; killed during an upload, it resumes on a "fresh machine" (an empty mirror
directory) and ends with the weights of an uninterrupted run; an upload that fails leaves the
bucket listing the previous checkpoint."""

import errno
import json
import logging
import os
import shutil
import signal
import sys

import numpy as np
import pytest

from helpers.logs import capture_logs
from helpers.paths import TESTS_DIR, import_file
from helpers.processes import run_bounded, subprocess_env
from helpers.s3 import serve_module
from tensorpack_lite.checkpoint import RemoteMirror, write_checkpoint_state
from tensorpack_lite.compat import tfv1
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars
from tensorpack_lite.utils import logger
from tensorpack_lite.utils.object_store import CACHE_ENV_VAR, local_mirror_dir, remote_filesystem

s3fs = pytest.importorskip('s3fs')
pytest.importorskip('moto')

SCRIPT = os.path.join(TESTS_DIR, 'resume_scripts', 'remote_resume.py')
TIMEOUT = 240
PARTS = ('.data-00000-of-00001', '.index', '.resume')
FINAL = ['model-6', 'model-12']   # max_to_keep=2 keeps the two ends of epochs (6 steps each)


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
    """A real S3 server (moto) on a port of localhost, for this module's tests only (a process
    left running would be taken for a leak by the tests that count child processes)."""
    yield from serve_module(tmp_path_factory)


@pytest.fixture
def s3_env(s3, monkeypatch, tmp_path):
    """This process talks to the server, with its mirrors under ``tmp_path/cache``."""
    s3.serve_this_process(monkeypatch)
    monkeypatch.setenv(CACHE_ENV_VAR, str(tmp_path / 'cache'))
    return s3


def listed(objects):
    """The checkpoints the ``checkpoint`` object lists, oldest first (the latest last)."""
    lines = objects['checkpoint'].decode().splitlines()
    names = [line.split('"')[1] for line in lines if line.startswith('all_model_checkpoint_paths')]
    latest = [line.split('"')[1] for line in lines if line.startswith('model_checkpoint_path')]
    assert latest == names[-1:], lines
    return names


def checkpoint_objects(objects):
    """The names of the objects that are files of ``model-<step>`` checkpoints."""
    return sorted(n for n in objects if n.startswith('model-'))


def run_script(s3, url, cache, *args, expect=0):
    env = subprocess_env(PYTHONHASHSEED='0', **s3.env)
    env[CACHE_ENV_VAR] = str(cache)
    code, output = run_bounded([sys.executable, SCRIPT, url] + list(args), TIMEOUT, env=env)
    assert code == expect, "exit {} (expected {}):\n{}".format(code, expect, output[-6000:])
    return output


def final_weights(url, cache, monkeypatch):
    """The variables of the newest checkpoint of ``url``, read through an empty mirror."""
    monkeypatch.setenv(CACHE_ENV_VAR, str(cache))
    values = load_chkpt_vars(url)
    assert values['global_step'] == 12
    return values


@pytest.fixture(scope='module')
def uninterrupted(s3, tmp_path_factory):
    """An uninterrupted run in s3://bucket/whole: its output and mirror's cache."""
    cache = tmp_path_factory.mktemp('whole-cache')
    output = run_script(s3, 's3://bucket/whole', cache)
    return output, cache


def test_a_run_writes_rotates_and_lists_its_checkpoints_in_the_bucket(s3_env, uninterrupted, tmp_path,
                                                                      monkeypatch):
    output, cache = uninterrupted
    print('\n'.join(line for line in output.splitlines() if 's3://' in line))
    objects = s3_env.objects('whole')
    assert listed(objects) == FINAL
    assert checkpoint_objects(objects) == sorted(base + part for base in FINAL for part in PARTS)
    mirror = local_mirror_dir('s3://bucket/whole', str(cache))
    for name in checkpoint_objects(objects) + ['stats.json', 'checkpoint']:
        with open(os.path.join(mirror, name), 'rb') as f:
            assert objects[name] == f.read(), name
    assert [r['epoch_num'] for r in json.loads(objects['stats.json'])] == [1, 2]
    assert b'Training has finished!' in objects['log.log']
    assert any(n.startswith('events.out.tfevents.') for n in objects)
    assert any(n.startswith('graph-') and n.endswith('.meta') for n in objects)
    # every checkpoint went up once, data first; those rotated out were deleted there
    uploads = [line for line in output.splitlines() if 'Uploaded model-' in line]
    assert [line.split('Uploaded ')[1].split(' to ')[0] for line in uploads] == [
        'model-2', 'model-4', 'model-6', 'model-8', 'model-10', 'model-12']
    assert "deleted there: model-2.index, model-2.resume, model-2.data-00000-of-00001" in output
    # read on another machine: the URL's newest checkpoint
    values = final_weights('s3://bucket/whole', tmp_path / 'reader', monkeypatch)
    assert sorted(os.listdir(local_mirror_dir('s3://bucket/whole', str(tmp_path / 'reader')))) == [
        '.remote-sync.json', 'checkpoint', 'model-12.data-00000-of-00001', 'model-12.index',
        'model-12.resume', 'stats.json']
    assert set(values) >= {'fc0/W', 'fc0/b', 'fc1/W', 'fc1/b'}
    assert load_chkpt_vars('s3://bucket/whole/model-6.index')['global_step'] == 6   # one checkpoint


def test_killed_during_an_upload_resumes_on_a_fresh_machine_as_never_stopped(
        s3_env, uninterrupted, tmp_path, monkeypatch):
    url = 's3://bucket/killed'
    output = run_script(s3_env, url, tmp_path / 'machine1', '--kill-uploading', 'model-10.index',
                        expect=-signal.SIGKILL)
    assert 'SIGKILL while uploading bucket/killed/model-10.index' in output
    objects = s3_env.objects('killed')
    # the upload of model-10 stopped after its data: the bucket lists the complete ones only
    assert listed(objects) == ['model-6', 'model-8']
    assert checkpoint_objects(objects) == sorted(
        [b + p for b in ('model-6', 'model-8') for p in PARTS] + ['model-10.data-00000-of-00001'])

    output = run_script(s3_env, url, tmp_path / 'machine2')   # an empty local disk
    mirror = local_mirror_dir(url, str(tmp_path / 'machine2'))
    assert "Pulled {} into {}: its state file lists model-6, model-8;".format(url, mirror) in output
    assert ("Removed from {} what an interrupted upload left (not listed by its state file): "
            "model-10.data-00000-of-00001.".format(url)) in output
    assert "Resuming from checkpoint {} (step 2 of 6 of epoch 2, global step 8).".format(
        os.path.join(mirror, 'model-8')) in output
    objects = s3_env.objects('killed')
    assert listed(objects) == FINAL
    assert checkpoint_objects(objects) == sorted(base + part for base in FINAL for part in PARTS)
    resumed = final_weights(url, tmp_path / 'reader1', monkeypatch)
    whole = final_weights('s3://bucket/whole', tmp_path / 'reader2', monkeypatch)
    assert sorted(resumed) == sorted(whole)
    for name in whole:   # bit-identical
        np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)


def _load_script():
    return import_file(SCRIPT, 'remote_resume')


def test_a_failed_upload_leaves_the_bucket_listing_the_previous_checkpoint(s3_env, monkeypatch, fixed_seed):
    url = 's3://bucket/failing'
    fs = remote_filesystem(url)[0]   # fsspec's instance of these options: the one the run uses
    put_file = fs.put_file
    uploaded, early, seen = [], [], {'failed': 0, 'listed after the failure': None}

    def failing_put(lpath, rpath, *args, **kwargs):
        name = os.path.basename(rpath)
        if name == 'model-4.index' and not seen['failed']:
            seen['failed'] += 1
            raise OSError(errno.EIO, 'injected failure', rpath)
        if seen['failed'] and seen['listed after the failure'] is None:   # the next upload, whichever
            seen['listed after the failure'] = listed(s3_env.objects('failing'))
        if name == 'checkpoint':   # every checkpoint it lists went up whole before it
            with open(lpath, 'rb') as f:
                early.extend(base for base in listed({'checkpoint': f.read()})
                             if not {base + part for part in PARTS} <= set(uploaded))
        put_file(lpath, rpath, *args, **kwargs)
        uploaded.append(name)
    monkeypatch.setattr(fs, 'put_file', failing_put)

    with capture_logs() as records, tfv1.Graph().as_default():
        _load_script().train(url)
    warnings = [m for m in records.messages(logging.WARNING) if 'Cannot upload the checkpoints' in m]
    assert len(warnings) == 1 and 'injected failure' in warnings[0], records.messages(logging.WARNING)
    assert seen == {'failed': 1, 'listed after the failure': ['model-2']}
    assert early == []
    assert uploaded.count('model-4.index') == 1 and uploaded.count('checkpoint') == 5   # 2, 6, 8, 10, 12
    objects = s3_env.objects('failing')
    assert listed(objects) == FINAL
    assert checkpoint_objects(objects) == sorted(base + part for base in FINAL for part in PARTS)
    logger.unset_logger_dir()


def test_a_model_saver_writes_to_a_url_beside_a_local_logger_directory(s3_env, tmp_path, fixed_seed):
    with tfv1.Graph().as_default():
        _load_script().train('s3://bucket/saver', logger_dir=str(tmp_path / 'log'))
    objects = s3_env.objects('saver')
    assert listed(objects) == FINAL    # the checkpoints alone: the logger directory is local
    assert sorted(objects) == ['checkpoint'] + sorted(base + part for base in FINAL for part in PARTS)
    assert not [name for name in os.listdir(str(tmp_path / 'log')) if name.startswith('model-')]
    mirror = local_mirror_dir('s3://bucket/saver', str(tmp_path / 'cache'))
    assert sorted(n for n in os.listdir(mirror) if n.startswith('model-')) == checkpoint_objects(objects)
    logger.unset_logger_dir()


def _local_checkpoint(directory, step):
    for part in PARTS:
        with open(os.path.join(directory, 'model-{}{}'.format(step, part)), 'w') as f:
            f.write('step {} {}'.format(step, part))


def test_a_failed_delete_in_the_bucket_is_one_warning_and_is_tried_again(s3_env, tmp_path):
    mirror = RemoteMirror('s3://bucket/deletes', str(tmp_path / 'mirror'))
    os.makedirs(mirror.local_dir)
    for step in (2, 4):
        _local_checkpoint(mirror.local_dir, step)
    write_checkpoint_state(mirror.local_dir, [os.path.join(mirror.local_dir, 'model-2'),
                                              os.path.join(mirror.local_dir, 'model-4')])
    assert mirror.push_checkpoints()
    refused = []

    def refuse(path, *args, **kwargs):
        refused.append(os.path.basename(path))
        raise PermissionError(errno.EACCES, 'injected refusal', path)
    _local_checkpoint(mirror.local_dir, 6)
    for part in PARTS:
        os.remove(os.path.join(mirror.local_dir, 'model-2' + part))
    write_checkpoint_state(mirror.local_dir, [os.path.join(mirror.local_dir, 'model-4'),
                                              os.path.join(mirror.local_dir, 'model-6')])
    rm_file, mirror.fs.rm_file = mirror.fs.rm_file, refuse   # fsspec's shared instance: put back below
    try:
        with capture_logs() as records:
            assert mirror.push_checkpoints()          # the new listing is up; the delete failed
            assert mirror.push_checkpoints()          # tried again: no second warning
    finally:
        mirror.fs.rm_file = rm_file
    assert refused == ['model-2.index', 'model-2.index']
    warnings = records.messages(logging.WARNING)
    assert len(warnings) == 1 and 'Cannot delete from s3://bucket/deletes: model-2.index' in warnings[0]
    objects = s3_env.objects('deletes')
    assert listed(objects) == ['model-4', 'model-6'] and 'model-2.index' in objects
    assert mirror.push_checkpoints()
    assert checkpoint_objects(s3_env.objects('deletes')) == sorted(
        b + p for b in ('model-4', 'model-6') for p in PARTS)


def test_logger_dir_of_a_url_is_a_local_mirror(s3_env, tmp_path):
    url = 's3://bucket/logger'
    logger.set_logger_dir(url, action='k')
    mirror = str(tmp_path / 'cache' / 'remote' / 's3' / 'bucket' / 'logger')
    assert logger.get_logger_dir() == mirror and logger.get_logger_url() == url
    logger.info('a line of the first run')
    logger.unset_logger_dir()
    assert logger.get_logger_url() is None
    s3_env.fs.put_file(os.path.join(mirror, 'log.log'), 'bucket/logger/log.log')
    shutil.rmtree(mirror)   # another machine: the bucket's log.log is kept as a local one would be
    logger.set_logger_dir(url, action='k')
    backups = [name for name in os.listdir(mirror) if name.startswith('log.log.')]
    assert len(backups) == 1
    with open(os.path.join(mirror, backups[0])) as f:
        assert 'a line of the first run' in f.read()
    logger.unset_logger_dir()
    with pytest.raises(ValueError, match="'b' .* not supported on object storage"):
        logger.set_logger_dir(url, action='b')
    logger.set_logger_dir(url, action='d')
    assert s3_env.objects('logger') == {} and os.listdir(mirror) == ['log.log']


def test_a_url_without_s3fs_names_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, 's3fs', None)
    monkeypatch.delitem(sys.modules['fsspec.registry']._registry, 's3', raising=False)
    with pytest.raises(ImportError, match=r"needs fsspec and s3fs: pip install 'tensorpack_lite\[s3\]'"):
        remote_filesystem('s3://bucket/run')
