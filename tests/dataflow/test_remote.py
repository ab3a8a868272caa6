"""dataflow.remote: send_dataflow_zmq in a real sender process, received by RemoteDataZMQ and by
ZMQInput driving a training run (which must train exactly as on local data)."""

import multiprocessing as mp

import numpy as np
import pytest

from helpers.callbacks import RecordCost
from helpers.dataflows import labelled_batches
from helpers.models import DigitsMLPBase
from helpers.timing import run_or_hang
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import DataFromList, RemoteDataZMQ, send_dataflow_zmq
from tensorpack_lite.input_source import QueueInput, ZMQInput
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils.serialize import dumps
from helpers.dataflows import Opaque

FORK = mp.get_context('fork')


def _send(df, addr, fmt=None):
    send_dataflow_zmq(df, addr, hwm=10, format=fmt)


class Sender(object):
    """A process running send_dataflow_zmq(df, addr) until the block ends."""

    def __init__(self, df, addr, fmt=None):
        self.proc = FORK.Process(target=_send, args=(df, addr, fmt))

    def __enter__(self):
        self.proc.start()
        return self.proc

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.join(10)
        assert self.proc.exitcode is not None


def numbered(n, offset=0):
    """Datapoints with a 19 KB array: it travels after the msgpack document, or in a frame."""
    return DataFromList([[np.full((80, 60), i + offset, np.float32), np.int64(i + offset),
                          {'name': 'dp{}'.format(i + offset), 'mask': np.arange(i + 1) % 2 == 0}]
                         for i in range(n)], shuffle=False)


@pytest.mark.parametrize('fmt', [None, 'frames'])
def test_remote_data_receives_every_datapoint_in_order(tmp_path, fmt):
    addr = 'ipc://' + str(tmp_path / 'pipe')
    remote = RemoteDataZMQ(addr, hwm=10)
    remote.reset_state()
    itr = iter(remote)
    with Sender(numbered(6), addr, fmt):
        out = [next(itr) for _ in range(12)]  # two epochs of the sender
    itr.close()
    assert [int(dp[1]) for dp in out] == list(range(6)) * 2
    for i, (image, label, extra) in enumerate(out[:6]):
        assert image.dtype == np.float32 and image.shape == (80, 60) and (image == i).all()
        assert type(label) is np.int64
        assert extra['name'] == 'dp{}'.format(i) and extra['mask'].dtype == bool
        np.testing.assert_array_equal(extra['mask'], np.arange(i + 1) % 2 == 0)
    assert remote.cnt1 == 12 and remote.cnt2 == 0


def test_remote_data_from_two_senders(tmp_path):
    addrs = ['ipc://' + str(tmp_path / 'a'), 'ipc://' + str(tmp_path / 'b')]
    remote = RemoteDataZMQ(*addrs, hwm=5)
    remote.reset_state()
    itr = iter(remote)

    def until_both_were_heard():
        got = []
        while len(set(got)) < 6:  # one sender may connect much later than the other: a hang fails
            got.append(int(next(itr)[1]))
        return got

    with Sender(numbered(3), addrs[0]), Sender(numbered(3, offset=100), addrs[1]):
        got = run_or_hang(until_both_were_heard)
    itr.close()
    assert set(got) == {0, 1, 2, 100, 101, 102}
    assert remote.cnt1 == sum(x < 100 for x in got) and remote.cnt2 == sum(x >= 100 for x in got)


def test_send_refuses_what_it_cannot_serialize(tmp_path):
    addr = 'ipc://' + str(tmp_path / 'nobody')
    bad = DataFromList([[np.zeros(2), 1], [np.zeros(2), {'k': Opaque()}]], shuffle=False)
    with pytest.raises(TypeError) as info:
        send_dataflow_zmq(bad, addr)
    assert "datapoint[1]['k']" in str(info.value) and 'Opaque' in str(info.value)
    with pytest.raises(ValueError, match='unknown format'):
        send_dataflow_zmq(bad, addr, format='json')


def _train(data, steps):
    costs = RecordCost()
    config = TrainConfig(model=DigitsMLPBase(hidden=16, lr=0.2), data=data, callbacks=[costs],
                         steps_per_epoch=steps, max_epoch=2)
    with tfv1.Graph().as_default():
        launch_train_with_config(config, SimpleTrainer())
    return costs.costs


def test_training_from_a_remote_sender_equals_local_training(digits, tmp_path):
    images, labels = digits
    df = labelled_batches(images[:640], labels[:640], batch=64)
    df.reset_state()
    assert dumps(next(iter(df)))[:4] == b'TPLF'  # 16 KiB images: the array travels after the document
    steps = 7  # the epochs of the trainer and of the dataflow (10 batches) do not line up
    local = _train(QueueInput(df), steps)
    addr = 'ipc://' + str(tmp_path / 'train-pipe')
    with Sender(df, addr):
        remote = _train(ZMQInput(addr, hwm=20, bind=True), steps)
    assert len(local) == len(remote) == 2 * steps
    assert local[-1] < local[0]  # it trains
    np.testing.assert_allclose(remote, local, rtol=1e-6)
