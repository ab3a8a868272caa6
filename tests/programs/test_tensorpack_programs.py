"""What tensorpack's own example programs do with the library, checked call by call.

Each test repeats the calls of one example (ResNet, ImageNetModels, GAN, HED, SpatialTransformer,
DoReFa-Net, basics) that failed when the example was run with its imports renamed, and checks
the result tensorpack 0.11 documents for them.
"""

import logging

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow.base import DataFlow, RNGDataFlow
from tensorpack_lite.dataflow.common import BatchData
from tensorpack_lite.dataflow.raw import DataFromList
from tensorpack_lite.train import TrainConfig, launch_train_with_config
from tensorpack_lite.train.trainers import SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated
from tensorpack_lite.utils.gpu import get_num_gpu

from helpers.models import LineRegression


# ----- DataFlow.size() / get_data(): imagenet_utils.eval_on_ILSVRC12 loops over dataflow.size() --

class _OldStyleCounter(RNGDataFlow):
    """A DataFlow written against the old protocol: get_data() and size() only."""

    def get_data(self):
        for i in range(3):
            yield [i]

    def size(self):
        return 3


def test_a_dataflow_with_only_get_data_and_size_iterates_and_has_a_length():
    df = _OldStyleCounter()
    df.reset_state()
    assert [dp for dp in df] == [[0], [1], [2]]
    assert len(df) == 3
    assert len(BatchData(df, 2, remainder=True)) == 2


def test_size_and_get_data_are_len_and_iter():
    df = BatchData(DataFromList([[k] for k in range(10)], shuffle=False), 4)
    df.reset_state()
    assert df.size() == len(df) == 2
    assert [b[0].tolist() for b in df.get_data()] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_size_of_a_dataflow_without_length_raises_not_implemented():
    class Endless(DataFlow):
        def __iter__(self):
            while True:
                yield [0]

    with pytest.raises(NotImplementedError, match='Endless'):
        Endless().size()


# ----- one tower on a machine without GPU: `SyncMultiGPUTrainerReplicated(max(get_num_gpu(), 1))` -

class _ReadTrainable(Callback):
    def _after_train(self):
        self.values = {v.op.name: self.trainer.sess.run(v) for v in tfv1.trainable_variables()}


@pytest.mark.parametrize('make_trainer', [SyncMultiGPUTrainerReplicated, SyncMultiGPUTrainerParameterServer])
def test_one_gpu_tower_trains_on_the_cpu_when_there_is_no_gpu(monkeypatch, logdir, make_trainer):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    assert get_num_gpu() == 0
    read = _ReadTrainable()
    data = BatchData(DataFromList([[np.float32(1), np.float32(1)]] * 4, shuffle=False), 2)
    model = LineRegression(lr=0.1, lr_variable=False)    # mean((w x - y)^2), w from 0
    config = TrainConfig(model=model, dataflow=data, callbacks=[read],
                         steps_per_epoch=2, max_epoch=1)
    launch_train_with_config(config, make_trainer(max(get_num_gpu(), 1)))
    # d cost / d w = 2 (w - 1): w = 0 -> 0.2 -> 0.36
    (name, value), = read.values.items()
    assert name.endswith('w')
    assert value == pytest.approx(0.36, abs=1e-6)


def test_two_gpu_towers_without_gpu_are_still_an_error(monkeypatch):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    with pytest.raises(ValueError, match=r'tower 0 asks for GPU 0 .* sees 0 GPU'):
        SyncMultiGPUTrainerReplicated(2)


# ----- utils.develop.deprecated: GAN.py decorates MultiGPUGANTrainer.__init__ with it ---------------

def test_deprecated_decorator_warns_and_calls_through(log_records):
    from tensorpack_lite.utils.develop import deprecated

    class Trainer:
        @deprecated("Please use GANTrainer and set num_gpu", "2019-01-31")
        def __init__(self, num_gpu):
            self.num_gpu = num_gpu

    assert Trainer(3).num_gpu == 3
    assert Trainer.__init__.__name__ == '__init__'
    warnings = [m for m in log_records.messages(logging.WARNING) if 'Trainer.__init__' in m]
    assert len(warnings) == 1
    assert 'Please use GANTrainer and set num_gpu' in warnings[0] and '2019-01-31' in warnings[0]


def test_log_deprecated_takes_tensorpacks_arguments(log_records):
    from tensorpack_lite.utils.develop import log_deprecated

    for _ in range(4):
        log_deprecated(name='OldThing', text='Use NewThing.', eos='2020-01-01', max_num_warnings=2)
    log_deprecated(text='Only a text.')
    warnings = log_records.messages(logging.WARNING)
    assert sum('OldThing is deprecated. Use NewThing.' in m and '2020-01-01' in m for m in warnings) == 2
    assert any('Only a text.' in m for m in warnings)
    with pytest.raises(ValueError, match='name or a text'):
        log_deprecated()


def test_model_desc_training_follows_the_tower_context():
    from tensorpack_lite.graph_builder.model_desc import ModelDescBase
    from tensorpack_lite.tfutils.tower import TowerContext
    model = ModelDescBase()
    with TowerContext('', is_training=True):
        assert model.training is True
    with TowerContext('infer', is_training=False):
        assert model.training is False
