"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import http.server
import logging
import os
import threading

import pytest

from tensorpack_lite.dataflow.dataset import common as dataset_common
from tensorpack_lite.utils import fs
from tensorpack_lite.utils.fs import (download, get_dataset_path, mkdir_p, normpath,
                                      recursive_walk)
from tensorpack_lite.utils.utils import change_env


def test_mkdir_p_recursive_walk_and_normpath(tmp_path):
    nested = tmp_path / 'a' / 'b' / 'c'
    mkdir_p(str(nested))
    mkdir_p(str(nested))          # exists: nothing happens
    mkdir_p('')                   # the current directory
    assert nested.is_dir()
    for rel in ('a/x.txt', 'a/b/y.txt', 'a/b/c/z.txt', 'top.txt'):
        (tmp_path / rel).write_text(rel)
    found = sorted(os.path.relpath(p, str(tmp_path)) for p in recursive_walk(str(tmp_path)))
    assert found == ['a/b/c/z.txt', 'a/b/y.txt', 'a/x.txt', 'top.txt']
    with pytest.raises(ValueError, match='needs a directory name'):
        mkdir_p(None)
    assert normpath('data//train/../val/') == 'data/val'
    assert normpath('gs://bucket//train/../val') == 'gs://bucket//train/../val'


def test_get_dataset_path_reads_the_variable_and_creates_nothing(tmp_path, monkeypatch):
    with change_env('TENSORPACK_DATASET', str(tmp_path / 'sets')):
        assert get_dataset_path('mnist_data', 'x') == str(tmp_path / 'sets' / 'mnist_data' / 'x')
    monkeypatch.setenv('HOME', str(tmp_path))
    with change_env('TENSORPACK_DATASET', None):
        assert get_dataset_path('cifar10_data') == str(tmp_path / 'tensorpack_data' / 'cifar10_data')
    assert not (tmp_path / 'tensorpack_data').exists() and not (tmp_path / 'sets').exists()
    # the datasets' module uses the same function (one home: utils.fs)
    assert dataset_common.get_dataset_path is get_dataset_path
    assert dataset_common.DATASET_ENV_VAR == fs.DATASET_ENV_VAR == 'TENSORPACK_DATASET'


PAYLOAD = bytes(range(256)) * 300      # 76800 bytes: several read chunks


@pytest.fixture
def source_file(tmp_path):
    path = tmp_path / 'src' / 'weights.bin'
    path.parent.mkdir()
    path.write_bytes(PAYLOAD)
    return path


def test_download_file_url(tmp_path, source_file, log_records):
    target_dir = str(tmp_path / 'out' / 'sub')
    path = download(source_file.as_uri(), target_dir, expect_size=len(PAYLOAD))
    assert path == os.path.join(target_dir, 'weights.bin')
    with open(path, 'rb') as f:
        assert f.read() == PAYLOAD
    # present with the expected size: kept, not downloaded again
    source_file.write_bytes(b'changed')
    assert download(source_file.as_uri(), target_dir, expect_size=len(PAYLOAD)) == path
    with open(path, 'rb') as f:
        assert f.read() == PAYLOAD
    assert any('not downloading it again' in m for m in log_records.messages(logging.INFO))
    # another file name
    renamed = download(source_file.as_uri(), target_dir, filename='renamed.bin')
    with open(renamed, 'rb') as f:
        assert f.read() == b'changed'
    assert sorted(os.listdir(target_dir)) == ['renamed.bin', 'weights.bin']


def test_download_size_mismatch_and_missing_source_leave_no_file(tmp_path, source_file):
    target_dir = tmp_path / 'out'
    with pytest.raises(OSError) as err:
        download(source_file.as_uri(), str(target_dir), expect_size=len(PAYLOAD) + 1)
    message = str(err.value)
    assert source_file.as_uri() in message
    assert 'gave {} bytes, but {} were expected'.format(len(PAYLOAD), len(PAYLOAD) + 1) in message
    assert os.listdir(str(target_dir)) == []          # no file, no temporary file
    missing = (tmp_path / 'nothing.bin').as_uri()
    with pytest.raises(OSError, match='failed to download ' + missing):
        download(missing, str(target_dir))
    assert os.listdir(str(target_dir)) == []
    empty = tmp_path / 'empty.bin'
    empty.write_bytes(b'')
    with pytest.raises(OSError, match='empty file'):
        download(empty.as_uri(), str(target_dir))
    assert os.listdir(str(target_dir)) == []
    with pytest.raises(ValueError, match='file name'):
        download('http://127.0.0.1/', str(target_dir))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the payload at /data/weights.bin, a truncated body at /truncated, 404 elsewhere."""

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == '/data/weights.bin':
            body, length = PAYLOAD, len(PAYLOAD)
        elif self.path == '/truncated':
            body, length = PAYLOAD[:1000], len(PAYLOAD)     # announces more than it sends
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header('Content-Length', str(length))
        self.send_header('Connection', 'close')
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


@pytest.fixture
def http_url():
    server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={'poll_interval': 0.05}, daemon=True)
    thread.start()
    try:
        yield 'http://127.0.0.1:{}'.format(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.timeout(60)
def test_download_over_http(tmp_path, http_url, monkeypatch):
    monkeypatch.setattr(fs, 'DOWNLOAD_TIMEOUT', 10)
    target_dir = str(tmp_path / 'out')
    path = download(http_url + '/data/weights.bin', target_dir, expect_size=len(PAYLOAD))
    with open(path, 'rb') as f:
        assert f.read() == PAYLOAD
    with pytest.raises(OSError, match='failed to download {}/missing.bin.*404'.format(http_url)):
        download(http_url + '/missing.bin', target_dir)
    # the connection closes early: the partial data never becomes a file
    with pytest.raises(OSError, match='failed to download {}/truncated.*after 1000 of the 76800 bytes'.format(
            http_url)):
        download(http_url + '/truncated', target_dir, filename='partial.bin')
    assert os.listdir(target_dir) == ['weights.bin']
