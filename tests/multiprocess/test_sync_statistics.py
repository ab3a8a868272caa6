"""The scope through which a trainer hands layers the mean across the ranks of a job."""

import threading

import pytest

from tensorpack_lite.multiprocess.sync_statistics import (cross_rank_mean, cross_rank_mean_scope,
                                                          has_cross_rank_mean)


def test_the_mean_is_the_providers_inside_the_scope_and_an_error_naming_the_caller_outside():
    assert not has_cross_rank_mean()
    with pytest.raises(RuntimeError, match='BatchNorm bn1: no mean across ranks'):
        cross_rank_mean(3.0, owner='BatchNorm bn1')
    with cross_rank_mean_scope(lambda t: t / 2):
        assert has_cross_rank_mean()
        assert cross_rank_mean(3.0) == 1.5
        with cross_rank_mean_scope(lambda t: t * 10):
            assert cross_rank_mean(3.0) == 30.0
        assert cross_rank_mean(3.0) == 1.5
    assert not has_cross_rank_mean()


def test_the_scope_ends_on_an_error_and_belongs_to_its_thread():
    seen = []
    with pytest.raises(KeyError):
        with cross_rank_mean_scope(lambda t: t):
            thread = threading.Thread(target=lambda: seen.append(has_cross_rank_mean()))
            thread.start()
            thread.join()
            raise KeyError('x')
    assert seen == [False]
    assert not has_cross_rank_mean()
    with pytest.raises(TypeError, match='must be callable'):
        with cross_rank_mean_scope(42):
            pass
