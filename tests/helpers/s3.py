"""A real S3 server for the tests of directories on object storage: moto's server mode on a free
port of localhost, with a bucket made (needs s3fs and moto)."""

import os
import subprocess
import sys
import urllib.request

from helpers.processes import kill_process_tree
from helpers.timing import HANG_TIMEOUT, wait_until
from tensorpack_lite.cluster.config import held_free_port

__all__ = ['S3Server', 'BUCKET']

BUCKET = 'bucket'
"""The bucket the server is started with."""


class S3Server:
    """``python -m moto.server`` on 127.0.0.1, with the bucket made; :attr:`env` is what a client
    needs (endpoint and credentials, read by fsspec/s3fs through botocore)."""

    def __init__(self, directory):
        with held_free_port() as port:
            self.port = port
        self.endpoint = 'http://127.0.0.1:{}'.format(self.port)
        self.env = {'AWS_ENDPOINT_URL': self.endpoint, 'AWS_ACCESS_KEY_ID': 'testing',
                    'AWS_SECRET_ACCESS_KEY': 'testing', 'AWS_DEFAULT_REGION': 'us-east-1'}
        self.log = open(os.path.join(directory, 'moto.log'), 'wb')
        command = [sys.executable, '-m', 'moto.server', '-H', '127.0.0.1', '-p', str(self.port)]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        try:
            assert wait_until(self._answers, timeout=60, interval=0.1), open(self.log.name).read()[-3000:]
            import s3fs
            self.fs = s3fs.S3FileSystem(endpoint_url=self.endpoint, key='testing', secret='testing',
                                        skip_instance_cache=True)
            self.fs.mkdir(BUCKET)
        except BaseException:   # no fixture teardown for a setup that failed: stop it here
            self.stop()
            raise

    def _answers(self):
        assert self.proc.poll() is None, open(self.log.name).read()[-3000:]
        try:
            with urllib.request.urlopen(self.endpoint + '/moto-api/', timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

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
