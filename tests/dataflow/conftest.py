"""Fixtures of the DataFlow tests."""

import pytest

from helpers.dataflows import SEED
from tensorpack_lite.utils import utils as rng_utils


@pytest.fixture
def dataflow_seed(monkeypatch):
    """fix_rng_seed(helpers.dataflows.SEED) for this test only."""
    monkeypatch.setattr(rng_utils, '_RNG_SEED', None)
    rng_utils.fix_rng_seed(SEED)
