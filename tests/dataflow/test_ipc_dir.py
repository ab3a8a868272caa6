"""dataflow.ipc_dir: the ipc directory's place and endpoints, and who removes it (the parent's
cleanup whoever is left; the last member to leave otherwise -- with processes in
test_parallel_reliability.py)."""

import os
import shutil
import tempfile

import pytest

from tensorpack_lite.dataflow.ipc_dir import IPCDir


@pytest.fixture
def short_tmp(monkeypatch):
    path = tempfile.mkdtemp(prefix='tpi-', dir='/tmp')
    monkeypatch.setattr(tempfile, 'tempdir', path)
    yield path
    leftovers = os.listdir(path)
    shutil.rmtree(path, ignore_errors=True)
    assert leftovers == []


def test_endpoints_are_in_a_directory_of_its_own_that_cleanup_removes(short_tmp):
    ipc = IPCDir('unit')
    assert os.path.dirname(ipc.path) == short_tmp
    assert os.path.basename(ipc.path).startswith('tplite-unit-')
    assert ipc.endpoint('data') == 'ipc://' + os.path.join(ipc.path, 'data')
    member = ipc.join()   # another member
    ipc.cleanup()
    assert not os.path.exists(ipc.path)   # the parent removes it whoever is left
    assert member.leave() is True and ipc.join() is None


def test_the_last_member_to_leave_removes_the_directory(short_tmp):
    ipc = IPCDir('unit')
    member = ipc.join()
    assert member.leave() is True
    assert os.path.isdir(ipc.path)   # the parent is still a member
    ipc.cleanup()
    assert not os.path.exists(ipc.path)


def test_a_temporary_directory_too_long_for_socket_paths_gives_way_to_tmp(monkeypatch):
    monkeypatch.setattr(tempfile, 'tempdir', '/tmp/' + 'x' * 90)   # never made: not used
    ipc = IPCDir('unit')
    try:
        assert os.path.dirname(ipc.path) == '/tmp'
        assert len(ipc.endpoint('results')) - len('ipc://') <= 103   # fits sockaddr_un
    finally:
        ipc.cleanup()
    assert not os.path.exists(ipc.path)
