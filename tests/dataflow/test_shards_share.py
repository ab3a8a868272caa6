"""A ShardedData's share given by the trainer, and which DataFlows' positions hold for any
number of processes (the jobs themselves: distributed/test_shards.py)."""

import pytest

from helpers.shards import numbers, write_numbered
from tensorpack_lite.dataflow import BatchData, BatchDataByShape, DataFromList, MapData, ShardedData
from tensorpack_lite.dataflow.shards.share import deal_shares, position_fits_any_world, sharded_streams


def test_the_trainer_deals_the_share_of_a_stream_made_without_one(tmp_path, log_records):
    url = str(tmp_path / 'data')
    write_numbered(url, 100)
    auto = ShardedData(url, lanes=4, cache_dir=str(tmp_path / 'a'))
    fixed = ShardedData(url, rank=0, world=2, lanes=4, cache_dir=str(tmp_path / 'f'))
    assert auto.share_from_trainer and (auto.rank, auto.world, len(auto)) == (0, 1, 100)
    df = BatchData(MapData(auto, lambda dp: dp), 4)
    assert sharded_streams(df) == [auto]
    deal_shares(df, 1, 3)
    deal_shares(fixed, 1, 3)
    assert (auto.rank, auto.world, len(auto)) == (1, 3, 33)
    assert (fixed.rank, fixed.world) == (0, 2)     # made with a share: kept
    said = [m for m in log_records.messages() if m.startswith('ShardedData')]
    assert said == ["ShardedData({}): the share of process 1 of 3 (from the trainer), 33 datapoints per "
                    "epoch.".format(url)]
    auto.reset_state()
    alone = ShardedData(url, rank=1, world=3, lanes=4, cache_dir=str(tmp_path / 'b'))
    alone.reset_state()
    assert numbers(auto) == numbers(alone)
    with pytest.raises(ValueError, match=r"give both rank and world, or neither .* got rank=1, world=None"):
        ShardedData(url, rank=1)


def test_positions_that_hold_for_any_number_of_processes(tmp_path):
    write_numbered(str(tmp_path / 'data'), 20)
    stream = ShardedData(str(tmp_path / 'data'))
    assert position_fits_any_world(stream)
    assert position_fits_any_world(BatchData(MapData(stream, lambda dp: dp), 2))
    assert not position_fits_any_world(BatchDataByShape(stream, 2, 1))    # its holders are its own
    assert not position_fits_any_world(BatchData(DataFromList([[1]] * 4), 2))
