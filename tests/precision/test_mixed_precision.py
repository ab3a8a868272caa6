"""Mixed precision (precision/mixed_precision.py): the session rewrite of each mode, float32
variables and checkpoints, checkpoints moving between modes, fp16's dynamic loss scaling
(a step with overflowing gradients is skipped), towers, predictors, the hardware warning."""

import json
import logging

import numpy as np
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.saver import ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.precision import mixed_precision
from tensorpack_lite.precision.mixed_precision import (MixedPrecision, missing_hardware,
                                                       mixed_precision_session_config)
from tensorpack_lite.predict import OfflinePredictor, PredictConfig
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import SaverRestore
from tensorpack_lite.train import (AsyncMultiGPUTrainer, ModelDesc, SimpleTrainer,
                                   SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated,
                                   TrainConfig, launch_train_with_config)
from tensorpack_lite.utils import logger

from helpers.logs import capture_logs
from helpers.precision import expected_precision_path

FEATURES = 8
OVERFLOW = 1e30


class ConvModel(ModelDesc):
    """A 1-channel 4x2 'image' through a 3x3 conv (4 channels) and a dense layer to one output,
    squared error, momentum (slots to check). Weights from a fixed seed."""

    def inputs(self):
        return [tf.TensorSpec([None, FEATURES], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        rng = np.random.RandomState(1)
        kernel = tfv1.get_variable('conv/W', initializer=(rng.randn(3, 3, 1, 4) * 0.3).astype('float32'))
        dense = tfv1.get_variable('fc/W', initializer=(rng.randn(FEATURES * 4, 1) * 0.2).astype('float32'))
        image = tf.reshape(x, [-1, 4, 2, 1])
        hidden = tf.nn.relu(tf.nn.conv2d(image, kernel, 1, 'SAME'))
        pred = tf.squeeze(tf.matmul(tf.reshape(hidden, [-1, FEATURES * 4]), dense), 1, name='pred')
        return tf.reduce_mean(tf.square(pred - y), name='cost')

    def optimizer(self):
        return tfv1.train.MomentumOptimizer(0.01, 0.9)


def samples(num, overflow_at=None):
    rng = np.random.RandomState(0)
    x = rng.randn(num, FEATURES).astype('float32')
    y = (x.sum(axis=1) * 0.5).astype('float32')
    if overflow_at is not None:
        x[overflow_at, 0] = OVERFLOW
    return [[a, b] for a, b in zip(x, y)]


def batches(num_batch, batch=4, overflow_batch=None):
    from tensorpack_lite.dataflow import BatchData
    overflow_at = None if overflow_batch is None else overflow_batch * batch
    return BatchData(DataFromList(samples(num_batch * batch, overflow_at), shuffle=False), batch)


class StepValues(Callback):
    """Before training and after every step: the values of the global variables, by name."""

    def __init__(self):
        self.steps = []

    def _setup_graph(self):
        self._vars = tfv1.global_variables() + tfv1.local_variables()

    def _read(self):
        return {v.op.name: value for v, value in zip(self._vars, self.trainer.sess.run(self._vars))}

    def _before_train(self):
        self.steps.append(self._read())

    def _trigger_step(self):
        self.steps.append(self._read())


def train(mode, logdir=None, num_batch=3, overflow_batch=None, callbacks=(), session_init=None,
          trainer=None, dataflow=None, **config):
    if logdir is not None:
        logger.set_logger_dir(str(logdir), action='d')
    cbs = list(callbacks) + ([ModelSaver()] if logdir is not None else [])
    dataflow = dataflow or batches(num_batch, overflow_batch=overflow_batch)
    config = TrainConfig(model=ConvModel(), dataflow=dataflow,
                         callbacks=cbs, max_epoch=1, mixed_precision=mode, session_init=session_init,
                         monitors=None if logdir is not None else [], **config)
    trainer = trainer or SimpleTrainer()
    launch_train_with_config(config, trainer)
    return trainer


def checkpoint_dtypes(logdir):
    reader = tfv1.train.NewCheckpointReader(tfv1.train.latest_checkpoint(str(logdir)))
    return {name: tf.as_dtype(dtype).name for name, dtype in reader.get_variable_to_dtype_map().items()}


# ----- the session rewrite ------------------------------------------------------------------

def test_fp16_on_a_cpu_keeps_the_passes_the_config_turns_on_or_off():
    rewrite = tfv1.ConfigProto().graph_options.rewrite_options
    rewrite.constant_folding = 2   # OFF
    rewrite.arithmetic_optimization = 2   # and with it common_subgraph_elimination
    rewrite.disable_model_pruning = True
    passes = mixed_precision_session_config('fp16', tfv1.ConfigProto(
        graph_options=tfv1.GraphOptions(rewrite_options=rewrite))).graph_options.rewrite_options.optimizers
    assert list(passes) == ['auto_mixed_precision_cpu', 'function', 'shape', 'layout', 'remap', 'loop',
                            'dependency']
    own = tfv1.ConfigProto()
    own.graph_options.rewrite_options.optimizers.extend(['constfold', 'auto_mixed_precision_cpu', 'remap'])
    passes = mixed_precision_session_config('fp16', own).graph_options.rewrite_options.optimizers
    assert list(passes) == ['auto_mixed_precision_cpu', 'constfold', 'remap']


def test_session_config_of_each_mode():
    base = tfv1.ConfigProto(inter_op_parallelism_threads=3)
    bf16 = mixed_precision_session_config('bf16', base)
    assert bf16.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 == 1
    assert bf16.inter_op_parallelism_threads == 3
    assert base.graph_options.rewrite_options.auto_mixed_precision_onednn_bfloat16 == 0   # a copy
    fp16 = mixed_precision_session_config('fp16', base).graph_options.rewrite_options
    assert fp16.auto_mixed_precision == 0   # no GPU here: the CPU rewrite, first of the passes
    assert list(fp16.optimizers) == ['auto_mixed_precision_cpu', 'pruning', 'function',
                                     'common_subgraph_elimination', 'constfold', 'shape', 'arithmetic',
                                     'layout', 'remap', 'loop', 'dependency']
    assert mixed_precision_session_config(None, base) == base
    with pytest.raises(ValueError, match="'fp32'"):
        mixed_precision_session_config('fp32')
    with pytest.raises(ValueError, match="'bfloat16'"):
        TrainConfig(model=ConvModel(), dataflow=batches(1), mixed_precision='bfloat16')
    with pytest.raises(ValueError, match='growth_interval'):
        MixedPrecision('fp16', growth_interval=0)


@pytest.mark.parametrize('mode', [None, 'bf16', 'fp16'])
def test_variables_and_checkpoint_stay_float32(tmp_path, mode):
    trainer = train(mode, tmp_path / 'log')
    config = trainer.sess._config
    rewrite = config.graph_options.rewrite_options
    assert rewrite.auto_mixed_precision_onednn_bfloat16 == (1 if mode == 'bf16' else 0)
    assert list(rewrite.optimizers[:1]) == (['auto_mixed_precision_cpu'] if mode == 'fp16' else [])
    floats = {v.op.name: v.dtype.base_dtype.name for v in tfv1.global_variables() if v.dtype.is_floating}
    assert 'conv/W/Momentum' in floats and set(floats.values()) == {'float32'}
    saved = checkpoint_dtypes(tmp_path / 'log')
    assert {n: d for n, d in saved.items() if d != 'int64'} == floats
    assert ('loss_scale/scale' in saved) == (mode == 'fp16')


# ----- checkpoints between modes and predictors ------------------------------------------------

class ValuesAtStart(Callback):
    def _before_train(self):
        variables = tfv1.trainable_variables()
        self.values = dict(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))


@pytest.mark.parametrize('first, second', [('bf16', None), (None, 'bf16'), ('fp16', None), (None, 'fp16')])
def test_checkpoint_restores_across_modes(tmp_path, first, second):
    train(first, tmp_path / 'first')
    path = tfv1.train.latest_checkpoint(str(tmp_path / 'first'))
    reader = tfv1.train.NewCheckpointReader(path)
    start = ValuesAtStart()
    with tfv1.Graph().as_default():
        train(second, tmp_path / 'second', callbacks=[start], session_init=SaverRestore(path))
    assert sorted(start.values) == ['conv/W', 'fc/W']
    for name, value in start.values.items():
        np.testing.assert_array_equal(value, reader.get_tensor(name))


def test_offline_predictor_after_a_bf16_run(tmp_path):
    train('bf16', tmp_path / 'log', num_batch=5)
    path = tfv1.train.latest_checkpoint(str(tmp_path / 'log'))
    reader = tfv1.train.NewCheckpointReader(path)
    x = np.stack([s[0] for s in samples(6)])
    with tfv1.Graph().as_default():
        for config in (None, mixed_precision_session_config('bf16')):
            predictor = OfflinePredictor(PredictConfig(
                model=ConvModel(), session_init=SaverRestore(path), input_names=['x'], output_names=['pred'],
                session_creator=NewSessionCreator(config=config)))
            pred, = predictor(x)
            # by hand, in numpy: SAME 3x3 conv on 4x2, relu, dense
            kernel, dense = reader.get_tensor('conv/W'), reader.get_tensor('fc/W')
            image = np.pad(x.reshape(-1, 4, 2), ((0, 0), (1, 1), (1, 1)))
            hidden = np.zeros((len(x), 4, 2, 4), np.float32)
            for i in range(4):
                for j in range(2):
                    hidden[:, i, j] = np.einsum('nab,abc->nc', image[:, i:i + 3, j:j + 3], kernel[:, :, 0])
            expected = np.maximum(hidden, 0).reshape(len(x), -1) @ dense[:, 0]
            tol = 1e-5 if config is None else 0.05    # bfloat16 keeps 8 bits of mantissa
            np.testing.assert_allclose(pred, expected, rtol=tol, atol=tol)


# ----- fp16 loss scaling ----------------------------------------------------------------------

def test_fp16_skips_a_step_whose_gradients_overflow_and_goes_on(tmp_path):
    values = StepValues()
    trainer = train(MixedPrecision('fp16', initial_scale=1024), tmp_path / 'log', num_batch=4,
                    overflow_batch=1, callbacks=[values])
    before, first, skipped, third, fourth = values.steps
    assert first['loss_scale/scale'] == 1024 and skipped['loss_scale/scale'] == 512
    for name in ('conv/W', 'fc/W', 'conv/W/Momentum', 'fc/W/Momentum'):
        assert not np.array_equal(before[name], first[name]), name     # a normal step changes them
        np.testing.assert_array_equal(skipped[name], first[name], err_msg=name)
        assert not np.array_equal(third[name], skipped[name]), name   # training goes on
        for step in values.steps:
            assert np.all(np.isfinite(step[name])), name
    assert [s['loss_scale/skipped_steps'] for s in values.steps] == [0, 0, 1, 1, 1]
    assert trainer.global_step == 4     # a skipped step still counts as a step
    with open(str(tmp_path / 'log' / 'stats.json')) as f:
        record = json.load(f)[-1]
    assert record['loss_scale/scale'] == 512 and record['loss_scale/skipped_steps'] == 1


def test_fp16_scale_grows_after_growth_interval_clean_steps():
    values = StepValues()
    train(MixedPrecision('fp16', initial_scale=8, growth_interval=2), num_batch=5, callbacks=[values])
    assert [s['loss_scale/scale'] for s in values.steps] == [8, 8, 16, 16, 32, 32]


# ----- towers ---------------------------------------------------------------------------------

def two_cpus():
    return NewSessionCreator(config=tfv1.ConfigProto(device_count={'CPU': 2}))


@pytest.mark.parametrize('mode', ['bf16', 'fp16'])
def test_replicated_two_towers_decide_together(mode):
    values = StepValues()
    trainer = SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='cpu')
    overflow = 2 if mode == 'fp16' else None     # batch 2 (of 6) goes to one tower in step 1 (of 3)
    precision = MixedPrecision('fp16', initial_scale=1024) if mode == 'fp16' else mode
    train(precision, num_batch=6, overflow_batch=overflow, callbacks=[values], trainer=trainer,
          dataflow=batches(6, overflow_batch=overflow), session_creator=two_cpus(), steps_per_epoch=3)
    rewrite = trainer.sess._config.graph_options.rewrite_options
    assert rewrite.auto_mixed_precision_onednn_bfloat16 == (1 if mode == 'bf16' else 0)
    last = values.steps[-1]
    for name in ('conv/W', 'fc/W', 'conv/W/Momentum'):
        np.testing.assert_array_equal(last['tower1/' + name], last[name])     # replicas agree
        assert np.all(np.isfinite(last[name]))
    if mode == 'fp16':
        skipped = [s for s, (a, b) in enumerate(zip(values.steps, values.steps[1:]))
                   if np.array_equal(a['conv/W'], b['conv/W'])]
        assert skipped == [1]
        assert last['loss_scale/scale'] == 512 and last['loss_scale/skipped_steps'] == 1


@pytest.mark.parametrize('make_trainer', [
    lambda: SyncMultiGPUTrainerParameterServer(['/cpu:0', '/cpu:1'], ps_device='cpu'),
    lambda: AsyncMultiGPUTrainer(['/cpu:0', '/cpu:1'])], ids=['ps', 'async'])
def test_fp16_on_parameter_server_and_async_towers(make_trainer):
    values = StepValues()
    train(MixedPrecision('fp16', initial_scale=1024), callbacks=[values], trainer=make_trainer(),
          dataflow=batches(6, overflow_batch=2), session_creator=two_cpus(), steps_per_epoch=3)
    assert [s['loss_scale/skipped_steps'] for s in values.steps] == [0, 0, 1, 1]
    assert [s['loss_scale/scale'] for s in values.steps] == [1024, 1024, 512, 512]
    assert all(np.all(np.isfinite(s[name])) for s in values.steps for name in ('conv/W', 'fc/W'))
    assert not np.array_equal(values.steps[2]['fc/W'], values.steps[3]['fc/W'])


# ----- the hardware warning ------------------------------------------------------------------

def test_the_warning_before_training_says_which_bf16_path_the_cpu_flags_give():
    float32 = missing_hardware('bf16', flags={'avx2', 'fma'})
    assert 'neither AVX512F nor AVX-NE-CONVERT' in float32 and 'this run trains in float32' in float32
    emulated = missing_hardware('bf16', flags={'avx512f'})
    assert 'emulates bfloat16 on AVX512F' in emulated and 'slow' in emulated
    assert missing_hardware('bf16', flags={'avx512f', 'avx512_bf16'}) is None
    assert missing_hardware('bf16', flags={'avx_ne_convert', 'amx_bf16'}) is None


def test_ops_in_16_bits_count_computing_ops_not_casts():
    graph = tfv1.Graph()
    with graph.as_default():
        x = tf.cast(tfv1.placeholder(tf.float32, [2, 2]), tf.bfloat16)
        y = tf.cast(tf.matmul(x, x) + x, tf.float32)
        tf.identity(y * 2.0)
    graph_def = graph.as_graph_def()
    computing, total = mixed_precision.ops_in_16_bits([graph_def], 'bf16')
    assert (computing, total) == (2, len(graph_def.node))          # MatMul and AddV2; not the casts
    assert mixed_precision.ops_in_16_bits([graph_def], 'fp16')[0] == 0


@pytest.mark.parametrize('mode, computing, flags, gpus, path, words', [
    ('bf16', 0, {'avx2'}, 0, 'float32', 'neither AVX512F nor AVX-NE-CONVERT'),
    ('bf16', 0, {'avx512f'}, 0, 'float32', 'found no op of this model to convert'),
    ('bf16', 5, {'avx512f'}, 0, 'emulated', 'emulated by oneDNN on AVX512F'),
    ('bf16', 5, {'avx512f', 'amx_bf16', 'avx512_bf16'}, 0, 'native', "instructions (amx_bf16, avx512_bf16)"),
    ('fp16', 5, set(), 0, 'emulated', 'emulated on the CPU (no GPU)'),
    ('fp16', 5, set(), 1, 'native', 'on the GPU'),
])
def test_measured_path_of_each_case(mode, computing, flags, gpus, path, words):
    assert mixed_precision.measured_path(mode, computing, flags=flags, num_gpu=gpus)[0] == path
    assert words in mixed_precision.measured_path(mode, computing, flags=flags, num_gpu=gpus)[1]


def test_the_first_step_measures_the_path_this_machine_takes(say_machine_fact):
    expected = expected_precision_path('bf16')
    with capture_logs() as records:
        trainer = train('bf16')
    report = trainer.precision_report
    say_machine_fact("bf16 took the '{}' path: {}".format(report.path, report.message))
    assert report.path == expected, report.message
    assert (report.computing > 0) == (expected != 'float32') and report.ops > report.computing
    measured = [m for m in records.messages() if 'measured at the first step' in m]
    assert measured == [report.message]
    warned = [m for m in records.messages_at(logging.WARNING) if 'mixed_precision' in m]
    assert len(warned) == {'native': 0, 'emulated': 2, 'float32': 2}[expected], warned   # before and measured
    with tfv1.Graph().as_default():
        assert train(None).precision_report is None


def test_fp16_without_gpu_warns_and_cpu_flags_are_read(tmp_path, monkeypatch):
    monkeypatch.setattr(mixed_precision, 'get_num_gpu', lambda: 0)
    assert 'no GPU' in missing_hardware('fp16')
    monkeypatch.setattr(mixed_precision, 'get_num_gpu', lambda: 1)
    assert missing_hardware('fp16') is None
    cpuinfo = tmp_path / 'cpuinfo'
    cpuinfo.write_text('processor\t: 0\nflags\t\t: fpu avx512f amx_bf16 avx512_bf16\n')
    assert mixed_precision.cpu_bf16_flags(str(cpuinfo)) == {'amx_bf16', 'avx512_bf16'}
    cpuinfo.write_text('flags\t\t: fpu avx512f\n')
    assert mixed_precision.cpu_bf16_flags(str(cpuinfo)) == set()


def test_setting_the_mode_after_the_graph_is_built_fails():
    trainer = train(None)
    with pytest.raises(RuntimeError, match='before the graph'):
        trainer.mixed_precision = 'bf16'


def test_inference_runner_in_a_bf16_run_and_export_serving_after_an_fp16_run(tmp_path):
    from tensorpack_lite.callbacks import InferenceRunner, ScalarStats
    from tensorpack_lite.tfutils.export import ModelExporter
    runner = InferenceRunner(batches(2), ScalarStats('cost'))
    train('bf16', tmp_path / 'bf16', num_batch=3, callbacks=[runner])
    with open(str(tmp_path / 'bf16' / 'stats.json')) as f:
        assert np.isfinite(json.load(f)[-1]['validation_cost'])
    with tfv1.Graph().as_default():
        train('fp16', tmp_path / 'fp16', num_batch=3)
    path = tfv1.train.latest_checkpoint(str(tmp_path / 'fp16'))
    x = np.stack([s[0] for s in samples(4)])
    with tfv1.Graph().as_default():
        config = PredictConfig(model=ConvModel(), session_init=SaverRestore(path), input_names=['x'],
                               output_names=['pred'])
        expected, = OfflinePredictor(config)(x)
        ModelExporter(config).export_serving(str(tmp_path / 'export'))
    with tfv1.Graph().as_default(), tfv1.Session() as sess:
        tfv1.saved_model.loader.load(sess, [tfv1.saved_model.SERVING], str(tmp_path / 'export'))
        assert {v.dtype.base_dtype for v in tfv1.global_variables()} == {tf.float32}
        np.testing.assert_allclose(sess.run('pred:0', {'x:0': x}), expected, rtol=1e-6)
