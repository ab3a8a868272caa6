"""The DataFlow state protocol (dataflow/state.py) in the library's DataFlows: a state taken in
the middle of an epoch, right after its last datapoint, or between two epochs, serialized and
restored in a NEW process (one subprocess restores every case), gives the rest of that epoch
and the two that follow, datapoint for datapoint. Also: the runners whose order is not
reproducible say what a resume guarantees instead, a subclass that changes ``__iter__`` is not
taken for one that saves its position, taking the state does not change the stream, and the
state holds no per-datapoint data: a shuffle buffer's state is a few kB whatever its datapoints
(the buffer is read again from an anchor), and a DataFlow whose state must hold datapoints says
so once, with their size."""

import itertools
import os
import queue
import subprocess
import sys

import numpy as np
import pytest

from helpers.processes import subprocess_env
from helpers.dataflow_cases import (CASES, JOBS, augmentors, build, close, double_first, epochs_after, images,
                                    numbers, write_data)
from tensorpack_lite.dataflow import (BatchData, BatchDataByShape, CacheData, ConcatData, DataFromGenerator,
                                      DataFromIterable, DataFromList, DataFromQueue, JoinData, LMDBData,
                                      LocallyShuffleData, MapData, MapDataComponent,
                                      MultiProcessMapAndBatchData, MultiProcessMapData, MultiProcessRunner,
                                      MultiProcessRunnerZMQ, MultiThreadMapData, MultiThreadRunner,
                                      RandomChooseData, RandomMixData, RemoteDataZMQ, RepeatedDataPoint,
                                      SelectComponent, imgaug)
from tensorpack_lite.dataflow.dataset import Digits, Mnist
from tensorpack_lite.dataflow.image import AugmentImageComponent
from tensorpack_lite.dataflow.state import DataFlowStateUnsupported, has_state
from tensorpack_lite.utils import utils
from tensorpack_lite.utils.serialize import dumps, loads

SEED = 1234


# ---------------------------------------------------------------- taking states (restoring: dataflow_cases)

def take_state(df, point, limit):
    """Iterate ``df`` (reset) to ``point``, taking its state after every datapoint: ``('at', k)``
    after the k-th datapoint of the stream, ``('end', e)`` after the last datapoint of epoch e
    (kept, not serialized, until that iteration ended), ``('between', e)`` after epoch e ended.
    Returns the serialized state and what ``df`` produced after it."""
    df.reset_state()
    kind, n = point
    count = 0
    for epoch in range(1, 10):
        iterator = iter(df)
        last = None
        for dp in iterator:
            count += 1
            last = df.get_state()
            if kind == 'at' and count == n:
                return dumps(last), epochs_after(df, limit, iterator)
        if kind == 'end' and epoch == n:
            return dumps(last), epochs_after(df, limit, iter([]))
        if kind == 'between' and epoch == n:
            return dumps(df.get_state()), epochs_after(df, limit)
    raise AssertionError("{} never reached {}".format(type(df).__name__, point))


def seeded(seed):
    """Context-free seeding for the module fixture: returns the function that undoes it."""
    before = utils._RNG_SEED
    utils.fix_rng_seed(seed)
    return lambda: setattr(utils, '_RNG_SEED', before)


@pytest.fixture(scope='module')
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp('state_data'))
    write_data(path)
    return path


@pytest.fixture(scope='module')
def restored(data_dir):
    """{job: (expected, restored)}: each job's state taken here (seeded), restored in one subprocess."""
    undo = seeded(SEED)
    expected, jobs = {}, []
    try:
        for name, point in JOBS:
            df, limit = build(name, data_dir)
            try:
                state, after = take_state(df, point, limit)
            finally:
                close(df)
            expected[name, point] = after
            jobs.append([name, data_dir, state])
    finally:
        undo()
    jobs_path, out_path = os.path.join(data_dir, 'jobs'), os.path.join(data_dir, 'results')
    with open(jobs_path, 'wb') as f:
        f.write(dumps(jobs))
    program = ("import sys; from helpers.dataflow_cases import restore_jobs; "
               "restore_jobs(sys.argv[1], sys.argv[2])")
    env = subprocess_env()
    proc = subprocess.run([sys.executable, '-c', program, jobs_path, out_path], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    assert proc.returncode == 0, proc.stdout.decode(errors='replace')[-3000:]
    with open(out_path, 'rb') as f:
        results = loads(f.read())
    return {job: (expected[job], result) for job, result in zip(JOBS, results)}


def same(a, b):
    """Equal datapoints (lists/tuples, dicts, arrays, numbers, strings), component per component."""
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) \
            and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) or isinstance(b, dict):
        return isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys() \
            and all(same(a[k], b[k]) for k in a)
    return np.array_equal(np.asarray(a), np.asarray(b))


def job_id(job):
    name, (kind, n) = job
    return '{}-{}{}'.format(name, kind, n)


@pytest.mark.parametrize('job', JOBS, ids=[job_id(job) for job in JOBS])
def test_a_state_restored_in_a_new_process_gives_what_follows(restored, job):
    expected, got = restored[job]
    assert not isinstance(got, str), got
    assert len(got) == len(expected)
    for k, (e, g) in enumerate(zip(expected, got)):
        assert same(e, g), "datapoint #{} after the state: {!r} != {!r}".format(k, g, e)
    assert expected, "the case should produce something after the state"


# ---------------------------------------------------------------- taking the state changes nothing

def stream(name, data_dir, take_states):
    df, limit = build(name, data_dir)
    df.reset_state()
    out = []
    try:
        for _ in range(2):
            for dp in itertools.islice(df, limit):
                out.append(dp)
                if take_states:
                    df.get_state()
    finally:
        close(df)
    return out


@pytest.mark.parametrize('name', list(CASES))
def test_taking_the_state_after_every_datapoint_leaves_the_stream_unchanged(name, data_dir, fixed_seed):
    fixed_seed(SEED)
    plain = stream(name, data_dir, take_states=False)
    fixed_seed(SEED)
    watched = stream(name, data_dir, take_states=True)
    assert plain and len(plain) == len(watched)
    assert all(same(a, b) for a, b in zip(plain, watched))


# ---------------------------------------------------------------- what cannot be saved, and says so

def _generator():
    yield [1]


UNSUPPORTED = {
    'MultiProcessRunnerZMQ': (lambda: MultiProcessRunnerZMQ(numbers(), num_proc=2), 'worker processes'),
    'MultiProcessRunner': (lambda: MultiProcessRunner(numbers(), num_prefetch=2, num_proc=2),
                           'worker processes'),
    'MultiThreadRunner': (lambda: MultiThreadRunner(numbers, num_prefetch=2, num_thread=2), 'threads'),
    'MultiThreadMapData': (lambda: MultiThreadMapData(numbers(), 2, double_first), 'strict=False'),
    'MultiProcessMapDataZMQ': (lambda: MultiProcessMapData(numbers(), 2, double_first), 'strict=False'),
    'MultiProcessMapAndBatchDataZMQ': (lambda: MultiProcessMapAndBatchData(numbers(), 2, double_first, 2),
                                       'a worker process iterates'),
    'RemoteDataZMQ': (lambda: RemoteDataZMQ('ipc:///tmp/unused-endpoint'), 'sender'),
    'DataFromQueue': (lambda: DataFromQueue(queue.Queue()), 'queue'),
    'DataFromGenerator': (lambda: DataFromGenerator(_generator), 'generator'),
    'DataFromIterable': (lambda: DataFromIterable({3, 1, 2}), 'the set it wraps is not a sequence'),
}


@pytest.mark.parametrize('name', list(UNSUPPORTED))
def test_a_runner_whose_order_is_not_reproducible_says_what_a_resume_gives(name):
    factory, reason = UNSUPPORTED[name]
    df = factory()   # not reset: no worker is started
    for call in (df.get_state, lambda: df.set_state({})):
        with pytest.raises(DataFlowStateUnsupported) as info:
            call()
        message = str(info.value)
        assert '\n' not in message
        assert message.startswith(name + ' cannot save its position: ') and reason in message
        assert 'drops the datapoints consumed in the epoch in progress (the epoch keeps its length)' \
            in message
    # a proxy over it names it too
    with pytest.raises(DataFlowStateUnsupported, match=name):
        BatchData(df, 1).get_state()


def test_an_augmentor_of_another_library_makes_the_augmenting_dataflow_unsupported():
    df = AugmentImageComponent(images(), [imgaug.Flip(horiz=True), imgaug.IAAugmentor(object())])
    df.reset_state()
    with pytest.raises(DataFlowStateUnsupported, match="IAAugmentor draws its random numbers from the"):
        df.get_state()


def test_the_same_dataflow_iterated_twice_side_by_side_cannot_save_its_position():
    shared = numbers()
    for df in (JoinData([shared, shared]), RandomMixData([shared, shared]),
               RandomChooseData([shared, shared])):
        df.reset_state()
        with pytest.raises(DataFlowStateUnsupported, match='the same DataFlow appears twice'):
            df.get_state()
    twice = ConcatData([shared, shared])   # one after the other: fine
    twice.reset_state()
    assert len(twice.get_state()['dfs']) == 2


def test_a_subclass_that_changes_the_iteration_is_not_taken_for_one_that_saves_its_position():
    class Reversed(DataFromList):
        def __iter__(self):
            return reversed(self.lst)

    class Labelled(DataFromList):   # changes the data, not the iteration
        def _datapoint_at(self, k):
            return ['label', self.lst[k]]

    class Doubled(MapData):
        def __iter__(self):
            for dp in self.ds:
                yield dp
                yield dp

    assert not has_state(Reversed([1, 2]))
    assert has_state(Labelled([1, 2]))
    assert not has_state(Doubled(numbers(), double_first))
    for df in (numbers(), MapDataComponent(numbers(), abs), SelectComponent(numbers(), [0]),
               AugmentImageComponent(images(), augmentors()), Mnist.__new__(Mnist), Digits.__new__(Digits),
               LMDBData.__new__(LMDBData), MultiThreadMapData(numbers(), 1, double_first, strict=True)):
        assert has_state(df), type(df).__name__
    with pytest.raises(DataFlowStateUnsupported, match='Doubled'):
        BatchData(Doubled(numbers(), double_first), 2).get_state()


# ---------------------------------------------------------------- a state is cheap

def _sizes(value):
    """The lengths of every list and array in ``value`` (nested)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in _sizes(v)]
    if isinstance(value, (list, tuple)):
        return [len(value)] + [n for v in value for n in _sizes(v)]
    if isinstance(value, np.ndarray):
        return [value.size]
    return []


@pytest.mark.parametrize('factory', [
    lambda: DataFromList(list(range(5000))),
    lambda: MapData(DataFromList(list(range(5000))), lambda x: x),
    lambda: CacheData(DataFromList([[k] for k in range(5000)]), shuffle=True),
    lambda: Digits('train'),
], ids=['DataFromList', 'MapData', 'CacheData', 'Digits'])
def test_a_state_holds_no_per_datapoint_data_and_its_order_is_not_copied_per_datapoint(factory):
    df = factory()
    df.reset_state()
    for epoch in range(2):   # CacheData: read, then replayed
        iterator = iter(df)
        first, second = next(iterator), next(iterator)
        state = df.get_state()
        assert first is not None and second is not None
        assert max(_sizes(state)) < 1000, _sizes(state)
        again = df.get_state()
        rng = (state.get('ds', state).get('rng') if 'start' not in state else state['rng'])
        assert rng is (again.get('ds', again).get('rng') if 'start' not in again else again['rng'])
        list(iterator)


def test_a_strict_parallel_map_reports_the_position_of_what_it_produced_not_of_what_it_prefetched():
    df = MultiThreadMapData(DataFromList([[k] for k in range(20)], shuffle=False), 2, lambda dp: dp,
                            buffer_size=8, strict=True)
    df.reset_state()
    try:
        iterator = iter(df)
        assert df.get_state() == {'ds': {'done': None, 'rng': None}}
        for k in range(1, 6):
            assert next(iterator) == [k - 1]
            assert df.get_state() == {'ds': {'done': k, 'rng': None}}
            assert df.ds.get_state()['done'] > k    # the input is read ahead
        list(iterator)
        assert df.get_state() == {'ds': {'done': None, 'rng': None}}
    finally:
        df.close()


def test_an_iteration_made_from_a_restored_state_and_dropped_unstarted_uses_the_position_up():
    """As the original's abandoned iteration did: the next one is a new iteration."""
    df = numbers(5)
    df.reset_state()
    iterator = iter(df)
    next(iterator)
    state = df.get_state()
    iterator.close()
    later = list(df)
    df.set_state(state)
    iter(df).close()   # e.g. JoinData made it, and another of its dataflows ended first
    assert list(df) == later


# ---------------------------------------------------------------- no datapoint in a state (issue 58)

ITEM_BYTES = 20000


@pytest.fixture(scope='module')
def big_items():
    """1500 datapoints [k, 20 kB of random bytes]: a buffer of 1000 of them is 20 MB."""
    rng = np.random.RandomState(7)
    return [[np.int64(k), rng.randint(0, 256, ITEM_BYTES).astype('uint8')] for k in range(1500)]


def identical(a, b):
    """Bit-identical datapoints [k, bytes]."""
    return len(a) == len(b) and all(int(x[0]) == int(y[0]) and x[1].tobytes() == y[1].tobytes()
                                    for x, y in zip(a, b))


def shuffled_big(items, **kwargs):
    return LocallyShuffleData(DataFromList(items, shuffle=True), 1000, **kwargs)


@pytest.mark.parametrize('kwargs', [{}, {'num_reuse': 2, 'shuffle_interval': 7}],
                         ids=['default', 'num_reuse2-interval7'])
def test_a_shuffle_buffer_state_holds_no_datapoint_and_resumes_bit_identically(big_items, kwargs, fixed_seed):
    """LocallyShuffleData(buffer 1000) over 20 kB datapoints: the state after the first datapoint,
    right after a shuffle, and deep in the stream is a few kB, and a fresh DataFlow restored from
    it produces the next 3000 datapoints of the uninterrupted stream, byte for byte."""
    fixed_seed(SEED)
    df = shuffled_big(big_items, **kwargs)
    df.reset_state()
    iterator = iter(df)
    stream, states, last_draw, shuffles = [], {}, None, 0
    while len(stream) < 9000 + 3000:
        stream.append(next(iterator))
        state, rng = df.get_state(), df.rng.get_state()
        draw = (rng[2], rng[1].tobytes())     # the generator moves only when the buffer is shuffled
        shuffles += last_draw is not None and draw != last_draw
        if len(stream) in (1, 9000) or (draw != last_draw and shuffles in (2, 3)):
            states[len(stream)] = dumps(state)
        last_draw = draw
    assert len(states) == 4, sorted(states)   # the first datapoint, two right after a shuffle, deep in
    for cut, state in sorted(states.items()):
        print("LocallyShuffleData(1000, {}) over {} B datapoints, state after datapoint {}: {} bytes".format(
            kwargs, ITEM_BYTES, cut, len(state)))
        assert len(state) < 1000000
        assert len(state) < ITEM_BYTES   # not even one datapoint
        fixed_seed(SEED + 1)             # the restored one draws nothing from its own seed
        again = shuffled_big(big_items, **kwargs)
        again.reset_state()
        again.set_state(loads(state))
        assert identical(list(itertools.islice(again, 3000)), stream[cut:cut + 3000]), cut


def replayed_counts(messages):
    """The datapoints each 'refilled its buffer' line says were read again."""
    return [int(m.split(' by reading ')[1].split()[0]) for m in messages if 'refilled its buffer' in m]


def test_entries_older_than_the_replay_limit_are_kept_in_the_state_said_in_one_line(fixed_seed):
    """With a shuffle at every datapoint and a replay limit of 3 buffers (a fifth of the default),
    some entries outlive the anchors: the state holds them (one log line, with their size), the
    resume stays exact, and no resume reads more than replay_limit plus one anchor interval again."""
    from helpers.logs import capture_logs  # here: the subprocess restoring states imports this module
    #                                    and should not import TensorFlow (helpers does)

    def flow():
        return LocallyShuffleData(DataFromList([[k] for k in range(200)], shuffle=True), 50,
                                  shuffle_interval=1, replay_limit=150)

    fixed_seed(SEED)
    df = flow()
    df.reset_state()
    iterator = iter(df)
    with capture_logs() as logs:
        stream, states = [], []
        for n in range(1, 2801):
            stream.append(next(iterator)[0])
            state = df.get_state()
            if n % 100 == 0 and n <= 2500:
                states.append((n, dumps(state)))
    kept = [len(loads(state)['kept']) for _, state in states]
    assert max(kept) > 0 and min(kept) == 0, kept
    line, = [m for m in logs.messages() if 'as they are' in m]
    assert line.startswith("LocallyShuffleData: its state holds ")
    assert " of its buffer's entries as they are (" in line
    assert 'kB; at most buffer_size=50): they entered more than replay_limit=156 datapoints ago' in line
    with capture_logs() as logs:
        for n, state in states:
            again = flow()
            again.reset_state()
            again.set_state(loads(state))
            assert [dp[0] for dp in itertools.islice(again, 300)] == stream[n:n + 300], n
    replayed = replayed_counts(logs.messages())
    assert len(replayed) == len(states) and max(replayed) <= 156 + 13   # 150 in anchors 13 (50 / 4) apart


def test_a_resume_reads_about_buffer_size_times_its_log_again_and_never_more_than_the_bound(fixed_seed):
    fixed_seed(SEED)
    df = LocallyShuffleData(DataFromList([[k] for k in range(300)], shuffle=True), 100)
    df.reset_state()
    iterator = iter(df)
    states = []
    for n in range(1, 20001):
        next(iterator)
        if n % 500 == 0:
            states.append(dumps(df.get_state()))
    from helpers.logs import capture_logs  # TensorFlow: see above
    with capture_logs() as logs:
        for state in states:
            again = LocallyShuffleData(DataFromList([[k] for k in range(300)], shuffle=True), 100)
            again.reset_state()
            again.set_state(loads(state))
    replayed = replayed_counts(logs.messages())
    print("buffer 100: a resume read {:.0f} datapoints again on average, at most {}; the bound is {}".format(
        np.mean(replayed), max(replayed), df.replay_limit + 25))
    # 100 * (ln 100 + 8) = 1260.5, rounded up to anchors 100 / 4 apart; at most one anchor interval more
    assert df.replay_limit == 1275 and len(replayed) == 40 and max(replayed) <= 1275 + 25
    assert 100 * np.log(100) / 2 < np.mean(replayed) < 2 * 100 * np.log(100)


def test_a_state_written_before_the_anchors_holding_the_buffer_is_restored(fixed_seed):
    """The earlier state of LocallyShuffleData held the buffer and the datapoint entering it: a run
    resumed from such a checkpoint goes on exactly, and its next states are small."""
    def flow():
        return LocallyShuffleData(DataFromList([[k] for k in range(10)], shuffle=False), 4,
                                  shuffle_interval=6)

    fixed_seed(SEED)
    df = flow()
    df.reset_state()
    rng = df.rng.get_state()
    stream = [dp[0] for dp in itertools.islice(df, 400)]
    # after the first datapoint: 0..4 read (4 made room and waits), no shuffle yet (the 6th read shuffles)
    old = {'ds': {'ds': {'done': 5, 'rng': None}, 'pass': None}, 'buffer': [[1], [2], [3]],
           'rng': dict(zip(['kind', 'keys', 'pos', 'has_gauss', 'cached_gaussian'], rng)),
           'count': 5, 'entering': [4], 'times': 1}
    again = flow()
    again.reset_state()
    again.set_state(loads(dumps(old)))
    assert loads(dumps(again.get_state()))['buffer'] == [[1], [2], [3]]   # not iterated yet: the same
    iterator = iter(again)
    assert [next(iterator)[0] for _ in range(200)] == stream[1:201]
    state = dumps(again.get_state())
    assert 'buffer' not in loads(state) and loads(state)['kept'] == []
    last = flow()
    last.reset_state()
    last.set_state(loads(state))
    assert [dp[0] for dp in itertools.islice(last, 199)] == stream[201:]


def test_a_shuffle_buffer_over_a_dataflow_without_state_says_so_and_shuffles_as_over_one_with_it(fixed_seed):
    streams = []
    for source in (DataFromGenerator(lambda: ([k] for k in range(20))),
                   DataFromList([[k] for k in range(20)], shuffle=False)):
        fixed_seed(SEED)
        df = LocallyShuffleData(source, 5)
        df.reset_state()
        streams.append([dp[0] for dp in itertools.islice(df, 100)])
        if isinstance(source, DataFromGenerator):
            with pytest.raises(DataFlowStateUnsupported, match='DataFromGenerator cannot save its position'):
                df.get_state()
    assert streams[0] == streams[1] and streams[0] != sorted(streams[0])


@pytest.mark.parametrize('name', ['RepeatedDataPoint', 'MultiThreadMapData-over-LocallyShuffleData'])
def test_the_states_an_input_source_keeps_in_flight_hold_no_datapoint(big_items, name):
    """What QueueInput keeps (its DataPosition's history of states, here 114: a queue of 50 and
    64 more) and what a strict parallel map keeps (a state per datapoint in its workers), over
    20 kB datapoints: a few kB each."""
    from tensorpack_lite.input_source.data_position import DataPosition   # TensorFlow: see above
    mapped = None
    if name == 'RepeatedDataPoint':
        df = RepeatedDataPoint(DataFromList(big_items), 3)
    else:
        mapped = MultiThreadMapData(shuffled_big(big_items), 2, lambda dp: dp, buffer_size=64, strict=True)
        df = BatchData(mapped, 8)
    position = DataPosition(df, 'QueueInput', history=50 + 64)
    df.reset_state()
    try:
        stream = position.datapoints()
        for _ in range(250):
            next(stream)
        kept = [len(dumps(position.state_after(n))) for n in range(250 - 114, 251)]
        in_flight = [len(dumps(state)) for state in mapped._positions.sent] if mapped is not None else []
    finally:
        close(df)
    print("{}: {} states kept, {} bytes serialized in all (the largest {}); {} in the map's workers, {} bytes"
          .format(name, len(kept), sum(kept), max(kept), len(in_flight), sum(in_flight)))
    assert max(kept) < ITEM_BYTES and sum(kept) < 1000000
    assert (len(in_flight) > 0) == (mapped is not None) and all(n < ITEM_BYTES for n in in_flight)


def test_a_dataflow_whose_state_must_hold_datapoints_says_so_once_with_their_size():
    from helpers.logs import capture_logs  # TensorFlow: see above
    shapes = DataFromList([[np.zeros((1 + k % 3, 100), 'float32')] for k in range(12)], shuffle=False)
    df = BatchDataByShape(shapes, 4, idx=0)
    df.reset_state()
    iterator = iter(df)
    with capture_logs() as logs:
        assert next(iterator)[0].shape == (4, 1, 100)     # datapoints 0, 3, 6 and 9
        for _ in range(3):
            state = df.get_state()
    line, = [m for m in logs.messages() if 'state holds' in m]
    waiting = sum(len(dps) for _, dps in state['holders'])
    assert waiting == 6    # 3 of shape (2, 100), 3 of shape (3, 100)
    assert line == ("BatchDataByShape: its state holds the 6 datapoint(s) waiting for a batch of their shape "
                    "({:.1f} kB; at most batch_size - 1 = 3 per shape).".format(
                        len(dumps([dp for _, dps in state['holders'] for dp in dps])) / 1e3))
