"""A real S3 server for the tests of directories on object storage: moto's server mode on a port
of localhost that the server picks itself, with a bucket made (needs s3fs and moto); it can be
stopped and started again on the same port with its objects (a storage outage)."""

import os
import re
import subprocess
import sys
import tempfile
import urllib.request

from helpers.processes import kill_process_tree, listening_ports
from helpers.timing import HANG_TIMEOUT, wait_until

__all__ = ['S3Server', 'BUCKET', 'serve', 'serve_module']

BUCKET = 'bucket'
"""The bucket the server is started with."""

_RUNNING_ON = re.compile(r'Running on http://127\.0\.0\.1:(\d+)')

_RESTORE = """
import os, sys
import boto3
from moto.server import ThreadedMotoServer
port, bucket, saved = int(sys.argv[1]), sys.argv[2], sys.argv[3]
loading = ThreadedMotoServer('127.0.0.1', 0, verbose=False)   # the same objects in this process
loading.start()
client = boto3.client('s3', endpoint_url='http://127.0.0.1:{}'.format(loading.get_host_and_port()[1]),
                      aws_access_key_id='testing', aws_secret_access_key='testing', region_name='us-east-1')
client.create_bucket(Bucket=bucket)
for folder, _, files in os.walk(saved):
    for name in files:
        with open(os.path.join(folder, name), 'rb') as f:
            key = os.path.relpath(os.path.join(folder, name), saved)
            client.put_object(Bucket=bucket, Key=key, Body=f.read())
loading.stop()
server = ThreadedMotoServer('127.0.0.1', port, verbose=False)
server.start()
print('Running on http://127.0.0.1:{}'.format(port), flush=True)
server._thread.join()
"""
"""What :meth:`S3Server.resume` runs: moto's server on the port of ``argv[1]``, listening only once
the objects saved under ``argv[3]`` are in bucket ``argv[2]`` (loaded through a server of the
same process on another port: the two share moto's state)."""


class S3Server:
    """``python -m moto.server`` on 127.0.0.1, with the bucket made; :attr:`env` is what a client
    needs (endpoint and credentials, read by fsspec/s3fs through botocore).

    The server binds port 0 and says which port it got: a port picked free here and handed to it
    could be taken by another process (another test's server) before it binds, and that process
    would then answer in its place."""

    def __init__(self, directory):
        self.directory = directory
        self.port = None
        self._start([sys.executable, '-m', 'moto.server', '-H', '127.0.0.1', '-p', '0'])
        try:
            self.endpoint = 'http://127.0.0.1:{}'.format(self.port)
            self.env = {'AWS_ENDPOINT_URL': self.endpoint, 'AWS_ACCESS_KEY_ID': 'testing',
                        'AWS_SECRET_ACCESS_KEY': 'testing', 'AWS_DEFAULT_REGION': 'us-east-1'}
            import s3fs
            self.fs = s3fs.S3FileSystem(endpoint_url=self.endpoint, key='testing', secret='testing',
                                        skip_instance_cache=True)
            self.fs.mkdir(BUCKET)
        except BaseException:   # no fixture teardown for a setup that failed: stop it here
            self.stop()
            raise

    def _start(self, command):
        """Start ``command``, the server, and wait until it answers on its port."""
        self.log = open(os.path.join(self.directory, 'moto.log'), 'ab')
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            assert wait_until(self._answers, timeout=60, interval=0.1), self._log_tail()
        except BaseException:
            self.stop()
            raise

    def pause(self):
        """A storage outage: keep a copy of the bucket's objects, then end the server (its
        connections with it)."""
        self.fs.invalidate_cache()
        self._saved = tempfile.mkdtemp(prefix='s3-objects-', dir=self.directory)
        for path in self.fs.find(BUCKET):
            local = os.path.join(self._saved, os.path.relpath(path, BUCKET))
            os.makedirs(os.path.dirname(local), exist_ok=True)
            with open(local, 'wb') as f:
                f.write(self.fs.cat_file(path))
        self.stop()

    def resume(self):
        """The server again on the same port, with the objects it had when :meth:`pause` was
        called, there before it answers a request (moto keeps its state in memory only)."""
        self._start([sys.executable, '-c', _RESTORE, str(self.port), BUCKET, self._saved])

    def _log_tail(self):
        with open(self.log.name) as log:
            return log.read()[-3000:]

    def _answers(self):
        assert self.proc.poll() is None, self._log_tail()
        found = _RUNNING_ON.findall(self._log_tail())
        if not found or int(found[-1]) not in listening_ports(self.proc):
            return False
        self.port = int(found[-1])
        try:
            url = 'http://127.0.0.1:{}/moto-api/'.format(self.port)
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def serve_this_process(self, monkeypatch):
        """This process's clients talk to the server, for the running test: :attr:`env` set, and
        the filesystems fsspec keeps for reuse dropped (one made for an earlier server, under the
        same arguments, would keep that server's endpoint)."""
        for key, value in self.env.items():
            monkeypatch.setenv(key, value)
        import s3fs
        s3fs.S3FileSystem.clear_instance_cache()

    def objects(self, run):
        """``{name: bytes}`` of the objects under ``s3://bucket/<run>``."""
        self.fs.invalidate_cache()
        try:
            names = [os.path.basename(p) for p in self.fs.ls('{}/{}'.format(BUCKET, run), detail=False)]
        except FileNotFoundError:
            return {}
        return {name: self.fs.cat_file('{}/{}/{}'.format(BUCKET, run, name)) for name in names}

    def stop(self):
        kill_process_tree(self.proc)
        self.proc.wait(HANG_TIMEOUT)
        self.log.close()


def serve(directory):
    """The body of a fixture: a server (its log in ``directory``), stopped after the tests that use
    it, also when a test paused it (the test is skipped without s3fs and moto)::

        @pytest.fixture
        def own_s3_server(tmp_path):     # a server of the test's own, which it may pause
            yield from serve(str(tmp_path))
    """
    import pytest
    pytest.importorskip('s3fs')
    pytest.importorskip('moto')
    server = S3Server(directory)
    yield server
    server.stop()


def serve_module(tmp_path_factory):
    """The body of a module-scoped fixture: :func:`serve` for the module's tests::

        @pytest.fixture(scope='module')
        def s3_server(tmp_path_factory):
            yield from serve_module(tmp_path_factory)
    """
    yield from serve(str(tmp_path_factory.mktemp('s3-server')))
