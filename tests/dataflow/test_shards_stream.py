import collections
import json
import os
import signal
import subprocess
import sys

import pytest

from helpers.processes import kill_process_tree, subprocess_env
from helpers.shards import directory_bytes, numbers, write_numbered
from helpers.timing import HANG_TIMEOUT, wait_until
from tensorpack_lite.dataflow import DataFlow, ShardedData
from tensorpack_lite.dataflow.shards.format import ShardFile
from tensorpack_lite.dataflow.shards.order import share_length
from tensorpack_lite.dataflow.state import has_state

OPTIONS = dict(seed=7, window=32, lanes=12, cache_bytes=1 << 20)


def worker(url, rank, world, cache_dir, **kwargs):
    df = ShardedData(url, rank=rank, world=world, cache_dir=str(cache_dir), **dict(OPTIONS, **kwargs))
    df.reset_state()
    return df


def test_a_dataflow_with_the_state_protocol(tmp_path):
    write_numbered(str(tmp_path / 'data'), 100)
    df = worker(str(tmp_path / 'data'), 1, 3, tmp_path / 'cache')
    assert isinstance(df, DataFlow) and has_state(df) and len(df) == 33
    assert df.get_state() == {'epoch': 0, 'consumed': 0, 'order': [7, 1, 32, 12, 100]}
    assert len(list(df)) == 33
    assert df.get_state() == {'epoch': 1, 'consumed': 0, 'order': [7, 1, 32, 12, 100]}
    with pytest.raises(ValueError, match=r'rank 3 is not in \[0, world=3\)'):
        ShardedData(str(tmp_path / 'data'), rank=3, world=3)


def test_mid_epoch_the_state_gives_exactly_the_rest_reading_only_it(tmp_path, monkeypatch):
    url = str(tmp_path / 'data')
    write_numbered(url, 500)
    df = worker(url, 0, 1, tmp_path / 'cache')
    first = numbers(df)
    uninterrupted = numbers(df)     # epoch 1
    df = worker(url, 0, 1, tmp_path / 'cache')
    assert numbers(df) == first
    epoch = iter(df)
    head = numbers(next(epoch) for _ in range(123))
    state = df.get_state()
    epoch.close()
    assert state['epoch'] == 1 and state['consumed'] == 123
    assert head == uninterrupted[:123] and uninterrupted != first

    reads = []
    real = ShardFile.record
    monkeypatch.setattr(ShardFile, 'record', lambda f, i: reads.append(i) or real(f, i))
    again = worker(url, 0, 1, tmp_path / 'new-cache')
    again.set_state(state)
    assert numbers(again) == uninterrupted[123:]
    assert len(reads) == 500 - 123      # no datapoint read before the saved place
    assert again.get_state()['epoch'] == 2      # then the next epoch


def test_a_state_of_another_order_is_refused(tmp_path):
    write_numbered(str(tmp_path / 'data'), 100)
    state = worker(str(tmp_path / 'data'), 0, 1, tmp_path / 'c').get_state()
    other = worker(str(tmp_path / 'data'), 0, 1, tmp_path / 'c', seed=8)
    with pytest.raises(ValueError, match=r"another order .* = \[7, 1, 32, 12, 100\], this one's \[8, 1, 32"):
        other.set_state(state)


def lockstep(workers, iterators, steps):
    """``steps`` steps of the workers (a datapoint from each); the numbers, and the state they all say."""
    taken = []
    for _ in range(steps):
        taken += numbers(next(it) for it in iterators)
    states = [w.get_state() for w in workers]
    assert all(s == states[0] for s in states), states
    return taken, states[0]


def start(url, world, tmp_path, state, round_):
    workers = [worker(url, k, world, tmp_path / 'cache-{}-{}'.format(round_, k)) for k in range(world)]
    for w in workers:
        if state is not None:
            w.set_state(state)
    return workers, [iter(w) for w in workers]


def test_resized_from_2_to_3_workers_and_back_mid_epoch_every_sample_once_per_epoch(tmp_path):
    url = str(tmp_path / 'data')
    write_numbered(url, 1200)
    seen = collections.defaultdict(list)
    state = None
    plan = [(0, 2, 150), (0, 3, 200), (0, 2, None), (1, 2, 101), (1, 3, 150), (1, 2, None)]
    for round_, (epoch, world, steps) in enumerate(plan):
        workers, iterators = start(url, world, tmp_path, state, round_)
        to_the_end = steps is None
        if to_the_end:
            steps = share_length(1200, state['consumed'], world)
        taken, state = lockstep(workers, iterators, steps)
        assert state['epoch'] == epoch
        seen[epoch] += taken
        for it in iterators:
            if to_the_end:
                assert next(it, None) is None
            it.close()
        if to_the_end:
            state = workers[0].get_state()
            assert state['epoch'] == epoch + 1 and state['consumed'] == 0
    counts = {epoch: collections.Counter(collections.Counter(taken).values())
              for epoch, taken in seen.items()}
    message = 'per epoch, {{times seen: samples}}: {}'.format(counts)
    print(message)
    assert counts == {0: {1: 1200}, 1: {1: 1200}}, message
    assert state == {'epoch': 2, 'consumed': 0, 'order': [7, 1, 32, 12, 1200]}


CHILD = r'''
import json, sys, time
from tensorpack_lite.dataflow import ShardedData
url, cache, out = sys.argv[1:]
df = ShardedData(url, rank=1, world=2, seed=7, window=32, lanes=12, cache_dir=cache, cache_bytes=1 << 20)
df.reset_state()
with open(out, 'w') as f:
    for count, (number, _) in enumerate(df, 1):
        f.write('{} {}\n'.format(int(number), json.dumps(df.get_state())))
        f.flush()
        if count == 40:
            time.sleep(600)     # killed here, mid-epoch, its cache fetching ahead
'''


def complete_lines(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().split('\n')[:-1]


def test_killed_mid_epoch_and_resumed_on_a_new_empty_cache_from_a_bucket(s3, tmp_path):
    write_numbered('s3://bucket/data', 1000)
    out = str(tmp_path / 'stream.txt')
    child = subprocess.Popen([sys.executable, '-c', CHILD, 's3://bucket/data', str(tmp_path / 'cache'), out],
                             env=subprocess_env(**s3.env), start_new_session=True)
    try:
        assert wait_until(lambda: len(complete_lines(out)) == 40 or child.poll() is not None, HANG_TIMEOUT)
        assert child.poll() is None, "the child ended early ({})".format(child.returncode)
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(HANG_TIMEOUT) == -signal.SIGKILL
    finally:
        kill_process_tree(child)
    lines = complete_lines(out)
    before = [int(line.split(' ', 1)[0]) for line in lines]
    state = json.loads(lines[-1].split(' ', 1)[1])
    assert state['consumed'] == 80 and state['epoch'] == 0

    resumed = worker('s3://bucket/data', 1, 2, tmp_path / 'new-cache')
    assert directory_bytes(tmp_path / 'new-cache') == 0
    resumed.set_state(state)
    after = numbers(resumed)
    uninterrupted = numbers(worker('s3://bucket/data', 1, 2, tmp_path / 'third-cache'))
    assert len(uninterrupted) == 500
    assert before == uninterrupted[:40] and after == uninterrupted[40:]
