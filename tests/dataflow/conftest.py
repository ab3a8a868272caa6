"""Fixtures of the DataFlow tests."""

import pytest

from helpers.dataflows import SEED
from tensorpack_lite.utils import utils as rng_utils


@pytest.fixture
def dataflow_seed(monkeypatch):
    """fix_rng_seed(helpers.dataflows.SEED) for this test only."""
    monkeypatch.setattr(rng_utils, '_RNG_SEED', None)
    rng_utils.fix_rng_seed(SEED)


@pytest.fixture(scope='module')
def s3_server(tmp_path_factory):
    """A real S3 server (moto) for the requesting module's tests (needs s3fs and moto)."""
    from helpers.s3 import serve_module
    yield from serve_module(tmp_path_factory)


@pytest.fixture
def own_s3_server(tmp_path):
    """A real S3 server of the requesting test's own, which it may pause and resume (an outage)."""
    from helpers.s3 import serve
    yield from serve(str(tmp_path))


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The module's S3 server, which this process's clients talk to for this test."""
    s3_server.serve_this_process(monkeypatch)
    return s3_server
