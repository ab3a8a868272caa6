"""A real S3 server for the tests of directories on object storage: moto's server mode on a port
of localhost that the server picks itself, with a bucket made (needs s3fs and moto)."""

import os
import re
import subprocess
import sys
import urllib.request

from helpers.processes import kill_process_tree, listening_ports
from helpers.timing import HANG_TIMEOUT, wait_until

__all__ = ['S3Server', 'BUCKET', 'serve_module']

BUCKET = 'bucket'
"""The bucket the server is started with."""

_RUNNING_ON = re.compile(r'Running on http://127\.0\.0\.1:(\d+)')


class S3Server:
    """``python -m moto.server`` on 127.0.0.1, with the bucket made; :attr:`env` is what a client
    needs (endpoint and credentials, read by fsspec/s3fs through botocore).

    The server binds port 0 and says which port it got: a port picked free here and handed to it
    could be taken by another process (another test's server) before it binds, and that process
    would then answer in its place."""

    def __init__(self, directory):
        self.log = open(os.path.join(directory, 'moto.log'), 'wb')
        command = [sys.executable, '-m', 'moto.server', '-H', '127.0.0.1', '-p', '0']
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.port = None
        try:
            assert wait_until(self._answers, timeout=60, interval=0.1), self._log_tail()
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

    def _log_tail(self):
        with open(self.log.name) as log:
            return log.read()[-3000:]

    def _answers(self):
        assert self.proc.poll() is None, self._log_tail()
        if self.port is None:
            found = _RUNNING_ON.search(self._log_tail())
            if found is None or int(found.group(1)) not in listening_ports(self.proc):
                return False
            self.port = int(found.group(1))
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


def serve_module(tmp_path_factory):
    """The body of a module-scoped fixture: a server for the module's tests, stopped after them
    (the test is skipped without s3fs and moto)::

        @pytest.fixture(scope='module')
        def s3_server(tmp_path_factory):
            yield from serve_module(tmp_path_factory)
    """
    import pytest
    pytest.importorskip('s3fs')
    pytest.importorskip('moto')
    server = S3Server(str(tmp_path_factory.mktemp('s3-server')))
    yield server
    server.stop()
