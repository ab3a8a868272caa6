"""The statistics a run records (stats.json, ``trainer.monitors``): two runs' records compared, the
timing statistics left out."""

import pytest

__all__ = ['TIMING_PREFIX', 'assert_records_close']

TIMING_PREFIX = 'StepTime/'
"""The statistics of :class:`StepTimeMonitor` (a default callback): measured times, which two runs
never share."""


def assert_records_close(got, expected, abs=1e-6):
    """Two lists of stats records (dicts of scalars) hold the same keys and values within ``abs``,
    the timing statistics (:data:`TIMING_PREFIX`) left out: their values differ between runs, and
    a run resumed inside an epoch measures fewer steps of it (the monitor reports after a few).

    pytest.approx compares one flat dict, not a list of them (pytest 9.2 refuses nested data).
    """
    assert len(got) == len(expected), (len(got), len(expected))
    for index, (mine, theirs) in enumerate(zip(got, expected)):
        mine, theirs = ({k: v for k, v in record.items() if not k.startswith(TIMING_PREFIX)}
                        for record in (mine, theirs))
        assert sorted(mine) == sorted(theirs), 'record {}'.format(index)
        assert mine == pytest.approx(theirs, abs=abs), 'record {}'.format(index)
