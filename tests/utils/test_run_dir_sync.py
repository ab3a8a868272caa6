"""RunDirectorySync against a real S3 server (moto's, helpers.s3): the run's files go up once each
(a file known equal is not moved again, also by another instance on the same mirror), transient
files never; a failed upload is one warning and is tried again; the upload in the background is
waited for at the end; a subclass leaves out what it moves itself and pushes it first at the end."""

import errno
import logging
import os
import re

import pytest

from helpers.logs import capture_logs
from helpers.s3 import serve_module
from tensorpack_lite.utils.run_dir_sync import SYNC_RECORD, RunDirectorySync, is_transient_file

pytest.importorskip('s3fs')
pytest.importorskip('moto')


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
    """The server, for this module's tests only (stopped at the module's end)."""
    yield from serve_module(tmp_path_factory)


@pytest.fixture
def run_dir(s3, monkeypatch, tmp_path, request):
    """(url, local mirror directory) of a run of its own in the bucket, this process talking to
    the server."""
    s3.serve_this_process(monkeypatch)
    mirror = tmp_path / 'mirror'
    mirror.mkdir()
    return 's3://bucket/' + re.sub(r'[^a-z0-9]+', '-', request.node.name.lower())[:60], str(mirror)


def write(directory, name, text):
    with open(os.path.join(directory, name), 'w') as f:
        f.write(text)


def count_uploads(monkeypatch, sync, fail=()):
    """The names ``sync`` uploaded, in order; an upload of a name in ``fail`` (a set the test may
    change) raises an OSError."""
    uploaded = []
    put_file = sync.fs.put_file   # fsspec's shared instance: monkeypatch puts it back

    def counting(lpath, rpath, *args, **kwargs):
        name = os.path.basename(rpath)
        if name in fail:
            raise OSError(errno.EIO, 'injected failure', rpath)
        put_file(lpath, rpath, *args, **kwargs)
        uploaded.append(name)
    monkeypatch.setattr(sync.fs, 'put_file', counting)
    return uploaded


def objects(s3, url):
    return s3.objects(url[len('s3://bucket/'):])


def test_the_run_files_go_up_once_each_and_the_transient_ones_never(s3, run_dir, monkeypatch):
    url, mirror = run_dir
    sync = RunDirectorySync(url, mirror)
    assert repr(sync) == 'RunDirectorySync({!r}, {!r})'.format(url, mirror)
    for name, text in [('stats.json', '[1]'), ('log.log', 'a line'), ('events.out.tfevents.1.host', 'e'),
                       ('.hidden', 'h'), ('stats.json.1a2b.tmp', 'half')]:
        write(mirror, name, text)
    uploaded = count_uploads(monkeypatch, sync)
    assert sync.push_files()
    assert uploaded == ['events.out.tfevents.1.host', 'log.log', 'stats.json']
    assert objects(s3, url) == {'events.out.tfevents.1.host': b'e', 'log.log': b'a line',
                                'stats.json': b'[1]'}
    assert os.path.isfile(os.path.join(mirror, SYNC_RECORD))

    assert sync.push_files() and uploaded == ['events.out.tfevents.1.host', 'log.log', 'stats.json']
    write(mirror, 'stats.json', '[1, 2]')
    assert sync.push_files() and uploaded[3:] == ['stats.json']
    again = RunDirectorySync(url, mirror)   # another run on this machine: the record is read back
    assert count_uploads(monkeypatch, again) == [] and again.push_files()
    assert objects(s3, url)['stats.json'] == b'[1, 2]'
    assert [is_transient_file(n) for n in ('.remote-sync.json', 'a.tmp', 'stats.json')] == [True, True, False]


def test_a_failed_upload_is_one_warning_and_is_tried_again(s3, run_dir, monkeypatch):
    url, mirror = run_dir
    sync = RunDirectorySync(url, mirror)
    write(mirror, 'stats.json', '[1]')
    write(mirror, 'log.log', 'a line')
    failing = {'stats.json'}
    uploaded = count_uploads(monkeypatch, sync, fail=failing)
    with capture_logs() as records:
        assert not sync.push_files()
        assert not sync.push_files()
    warnings = records.messages(logging.WARNING)
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("Cannot upload the files of {} to {} (OSError: ".format(mirror, url))
    assert 'injected failure' in warnings[0]
    assert objects(s3, url) == {'log.log': b'a line'}   # the uploads before the failure are there

    failing.clear()
    # what went up before a failure is known equal only once a push ends: it goes up again
    assert sync.push_files() and uploaded == ['log.log', 'log.log', 'log.log', 'stats.json']
    assert sync.push_files() and len(uploaded) == 4
    assert objects(s3, url) == {'log.log': b'a line', 'stats.json': b'[1]'}


def test_the_upload_in_the_background_is_waited_for_at_the_end(s3, run_dir, monkeypatch):
    url, mirror = run_dir
    sync = RunDirectorySync(url, mirror)
    write(mirror, 'stats.json', '[1]')
    uploaded = count_uploads(monkeypatch, sync)
    sync.push_files_in_background()
    sync.push_files_in_background()   # while one may run: once more after it, never two at once
    write(mirror, 'log.log', 'the end')
    assert sync.finish()
    assert objects(s3, url) == {'stats.json': b'[1]', 'log.log': b'the end'}
    assert sorted(uploaded) == ['log.log', 'stats.json']


class KeepsItsOwn(RunDirectorySync):
    """A sync that moves ``own-*`` files itself, first at the end."""

    def __init__(self, url, local_dir, own_done):
        super().__init__(url, local_dir)
        self.own_done = own_done
        self.events = []

    def _is_run_file(self, name):
        return super()._is_run_file(name) and not name.startswith('own-')

    def _finish_own_files(self):
        self.events.append('own files')
        return self.own_done

    def push_files(self):
        self.events.append('run files')
        return super().push_files()


@pytest.mark.parametrize('own_done', [True, False])
def test_a_subclass_moves_its_own_files_first_at_the_end(s3, run_dir, own_done):
    url, mirror = run_dir
    sync = KeepsItsOwn(url, mirror, own_done)
    write(mirror, 'own-1', 'mine')
    write(mirror, 'stats.json', '[1]')
    assert sync.finish() is own_done
    assert sync.events == ['own files', 'run files']
    assert objects(s3, url) == {'stats.json': b'[1]'}


def test_a_local_directory_is_refused_naming_the_class(tmp_path):
    with pytest.raises(ValueError, match=r"^RunDirectorySync needs a URL of object storage \(s3://, gs://\)"):
        RunDirectorySync(str(tmp_path))
