"""Data-parallel trainers on virtual CPU devices: k towers each fed their own batch make
the update of one SimpleTrainer step on the k batches concatenated; replicas stay equal;
checkpoints restore into single-tower models; bad towers or modes fail early, never hang."""

import logging
import os
import threading

import numpy as np
import pytest

from tensorpack_lite.callbacks import (
    Callback, ClassificationError, DataParallelInferenceRunner, InferenceRunner, ModelSaver, RunUpdateOps,
    ScalarStats)
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.input_source import FeedInput, QueueInput, StagingInput
from tensorpack_lite.predict import (
    DataParallelOfflinePredictor, MultiTowerOfflinePredictor, OfflinePredictor, PredictConfig)
from tensorpack_lite.tfutils.sessinit import SaverRestore
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars
from tensorpack_lite.train import (
    AsyncMultiGPUTrainer, ModelDesc, SimpleTrainer, SyncMultiGPUTrainer, SyncMultiGPUTrainerParameterServer,
    SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config)
from tensorpack_lite.utils.naming import MOVING_SUMMARY_OPS_KEY

from helpers.models import DigitsMLPBase
from helpers.graphs import ReadAllVariables, cpus
from helpers.multigpu import cpu_session_creator, train_towers

BATCH = 8      # per tower
STEPS = 3
MAIN_VARIABLES = ['fc0/W', 'fc0/b', 'fc1/W', 'fc1/b']


def tower_batches(digits, k, steps=STEPS):
    """The datapoints of k towers for `steps` steps: tower i of step s gets batch s*k+i."""
    images, labels = digits
    return [[images[n * BATCH:(n + 1) * BATCH], labels[n * BATCH:(n + 1) * BATCH]] for n in range(k * steps)]


def concatenated(batches, k):
    """One datapoint per step: the k towers' batches of that step, concatenated."""
    return [[np.concatenate([batches[s * k + i][c] for i in range(k)]) for c in range(2)]
            for s in range(len(batches) // k)]


class RecordTowerImages(Callback):
    """The 'image' input each training tower consumed, step by step."""

    def _setup_graph(self):
        self.tensors = [tower['image'] for tower in self.trainer.towers.training()]
        self.steps = []

    def _before_run(self, ctx):
        return self.tensors

    def _after_run(self, ctx, values):
        self.steps.append(values.results)


@pytest.fixture(scope='module')
def reference(digits):
    """SimpleTrainer's variables after STEPS steps on the concatenated batches of k towers."""
    cache = {}

    def get(k):
        if k not in cache:
            with tfv1.Graph().as_default():
                source = FeedInput(DataFromList(concatenated(tower_batches(digits, k), k), shuffle=False))
                cache[k] = train_towers(SimpleTrainer(), source, 1, DigitsMLPBase(), STEPS)
        return cache[k]
    return get


def assert_replicas_equal_main(values, k):
    for name in MAIN_VARIABLES:
        for index in range(1, k):
            np.testing.assert_array_equal(values['tower{}/{}'.format(index, name)], values[name])


def assert_matches_reference(values, ref):
    for name in MAIN_VARIABLES:
        np.testing.assert_allclose(values[name], ref[name], rtol=0, atol=1e-5, err_msg=name)
    assert not any(name.startswith('tower') for name in values if name in ref)


SYNC_CASES = [
    ('ps-cpu', 2, lambda devs: SyncMultiGPUTrainerParameterServer(devs, ps_device='cpu')),
    ('ps-gpu', 3, lambda devs: SyncMultiGPUTrainerParameterServer(devs, ps_device='gpu')),
    ('replicated-cpu', 2, lambda devs: SyncMultiGPUTrainerReplicated(devs, mode='cpu')),
    ('replicated-gpu', 2, lambda devs: SyncMultiGPUTrainerReplicated(devs, mode='gpu')),
    ('replicated-collective', 2, lambda devs: SyncMultiGPUTrainerReplicated(devs, mode='collective')),
    ('replicated-collective', 3, lambda devs: SyncMultiGPUTrainerReplicated(devs, mode='collective')),
    ('replicated-hierarchical', 8, lambda devs: SyncMultiGPUTrainerReplicated(devs, mode='hierarchical')),
]


@pytest.mark.parametrize('name, k, make', SYNC_CASES, ids=['{}-{}'.format(c[0], c[1]) for c in SYNC_CASES])
def test_k_towers_make_the_update_of_one_tower_on_the_concatenated_batch(digits, reference, name, k, make):
    batches = tower_batches(digits, k)
    trainer = make(cpus(k))
    trainer.BROADCAST_EVERY_EPOCH = False   # replicas must stay equal by themselves
    recorder = RecordTowerImages()
    values = train_towers(trainer, QueueInput(DataFromList(batches, shuffle=False)), k, DigitsMLPBase(),
                          STEPS, callbacks=[recorder])
    # tower i of step s got datapoint s*k+i
    for step, images in enumerate(recorder.steps):
        for tower, image in enumerate(images):
            np.testing.assert_array_equal(image, batches[step * k + tower][0])
    assert_matches_reference(values, reference(k))
    if name.startswith('replicated'):
        assert_replicas_equal_main(values, k)
        assert sorted(n for n in values if n.startswith('tower')) == sorted(
            'tower{}/{}'.format(i, v) for i in range(1, k) for v in MAIN_VARIABLES)
    else:
        assert not [n for n in values if n.startswith('tower')]


def test_launch_train_with_config_stages_the_queue_of_the_towers(digits, reference, log_records):
    k = 2
    trainer = SyncMultiGPUTrainerReplicated(cpus(k))
    readback = ReadAllVariables()
    config = TrainConfig(model=DigitsMLPBase(),
                         dataflow=DataFromList(tower_batches(digits, k), shuffle=False),
                         callbacks=[readback], monitors=[], extra_callbacks=[], max_epoch=1,
                         steps_per_epoch=STEPS, session_creator=cpu_session_creator(k))
    launch_train_with_config(config, trainer)
    messages = records_text(log_records)
    assert 'Automatically applying StagingInput' in messages and "mode='gpu'" in messages
    values = readback.values
    assert_matches_reference(values, reference(k))
    assert_replicas_equal_main(values, k)
    # the sync op ran before training and after the epoch (BROADCAST_EVERY_EPOCH)
    assert messages.count('Running Op sync_variables/sync_variables_from_main_tower') == 2


def records_text(records):
    return '\n'.join(records.messages(logging.DEBUG))


class CountingMLP(DigitsMLPBase):
    """Adds a moving summary of the cost and an update op counting the steps of its tower."""

    def outputs(self, logits, label):
        cost = super().outputs(logits, label)
        counter = tfv1.get_variable('counter', initializer=0, trainable=False)
        tfv1.add_to_collection(tfv1.GraphKeys.UPDATE_OPS, tfv1.assign_add(counter, 1))
        add_moving_summary(cost)
        return cost


def test_replicated_runs_update_ops_and_summaries_of_the_main_tower_only(digits):
    k = 2
    trainer = SyncMultiGPUTrainerReplicated(cpus(k), mode='collective')
    trainer.BROADCAST_EVERY_EPOCH = False
    values = train_towers(trainer, QueueInput(DataFromList(tower_batches(digits, k), shuffle=False)), k,
                          CountingMLP(), STEPS, callbacks=[RunUpdateOps()])
    assert values['counter'] == STEPS and values['tower1/counter'] == 0
    assert [t.name for t in tfv1.get_collection(MOVING_SUMMARY_OPS_KEY)] == ['EMA/cost_EMA:0']


def test_sync_multigpu_trainer_is_a_parameter_server_on_the_cpu():
    trainer = SyncMultiGPUTrainer(cpus(2))
    assert isinstance(trainer, SyncMultiGPUTrainerParameterServer)
    assert trainer._builder.ps_device == 'cpu' and trainer.devices == cpus(2)
    assert SyncMultiGPUTrainerParameterServer(cpus(2))._builder.ps_device == 'gpu'
    assert SyncMultiGPUTrainerParameterServer(cpus(3))._builder.ps_device == 'cpu'


# ----- async ------------------------------------------------------------------------------------

class LinearCost(ModelDesc):
    """cost = mean(x) . w: its gradient, mean(x), does not depend on w, so the result of
    several updates does not depend on their order."""

    def inputs(self):
        return [tf.TensorSpec([None, 4], tf.float32, 'x')]

    def build_graph(self, x):
        w = tfv1.get_variable('w', initializer=np.zeros(4, 'float32'))
        return tf.reduce_sum(tf.reduce_mean(x, 0) * w, name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.5)


@pytest.mark.parametrize('scale_gradient', [True, False])
def test_async_applies_one_update_per_tower(scale_gradient):
    k, steps = 2, 2
    rng = np.random.RandomState(0)
    batches = [[rng.rand(3, 4).astype('float32')] for _ in range(k * steps)]
    trainer = AsyncMultiGPUTrainer(cpus(k), scale_gradient=scale_gradient)
    values = train_towers(trainer, QueueInput(DataFromList(batches, shuffle=False)), k, LinearCost(), steps)
    updates = [0.5 * b[0].mean(0) / (k if scale_gradient else 1) for b in batches]
    np.testing.assert_allclose(values['w'], -np.sum(updates, 0), rtol=1e-6)
    assert values['global_step'] == steps


# ----- checkpoints ------------------------------------------------------------------------------

def test_replicated_checkpoint_restores_into_single_tower_models(digits, logdir):
    k = 2
    trainer = SyncMultiGPUTrainerReplicated(cpus(k), mode='collective')
    values = train_towers(trainer, QueueInput(DataFromList(tower_batches(digits, k), shuffle=False)), k,
                          DigitsMLPBase(), STEPS, callbacks=[ModelSaver()])
    checkpoint = os.path.join(logdir, 'model-{}'.format(STEPS))
    saved = load_chkpt_vars(checkpoint)
    assert set(MAIN_VARIABLES) < set(saved) and not [n for n in saved if n.startswith('tower')]
    for name in MAIN_VARIABLES:
        np.testing.assert_array_equal(saved[name], values[name])

    images = digits[0][:20]
    with tfv1.Graph().as_default():
        restored = ReadAllVariables()
        simple = SimpleTrainer()
        model = DigitsMLPBase()
        simple.setup_graph(model.get_input_signature(), FeedInput(DataFromList(tower_batches(digits, 1))),
                           model.build_graph, model.get_optimizer)
        simple.train_with_defaults(callbacks=[restored], monitors=[], extra_callbacks=[], steps_per_epoch=1,
                                   max_epoch=STEPS + 1, starting_epoch=STEPS + 1,
                                   session_init=SaverRestore(checkpoint))
    assert restored.values['global_step'] == STEPS + 1   # restored at 3, then one step

    config = PredictConfig(model=DigitsMLPBase(), input_names=['image'], output_names=['logits'],
                           session_init=SaverRestore(checkpoint))
    predictor = OfflinePredictor(config)
    logits, = predictor(images)
    hidden = np.maximum(images @ values['fc0/W'] + values['fc0/b'], 0)
    np.testing.assert_allclose(logits, hidden @ values['fc1/W'] + values['fc1/b'], rtol=1e-5, atol=1e-5)


# ----- bad input --------------------------------------------------------------------------------

def run_with_timeout(func, seconds=60):
    """Run func() in a thread (in the caller's default graph); its exception is re-raised;
    still running after `seconds` fails."""
    outcome = {}
    graph = tfv1.get_default_graph()

    def target():
        try:
            with graph.as_default():
                func()
        except BaseException as err:   # noqa: B902 - handed to the test
            outcome['error'] = err
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "still running after {} s: a hang".format(seconds)
    if 'error' in outcome:
        raise outcome['error']


@pytest.mark.parametrize('mode, soft_placement', [('collective', True), ('gpu', True), ('collective', False)])
def test_more_towers_than_devices_is_an_error_before_any_step(digits, mode, soft_placement):
    trainer = SyncMultiGPUTrainerReplicated(cpus(3), mode=mode)
    model = DigitsMLPBase()
    trainer.setup_graph(model.get_input_signature(), QueueInput(DataFromList(tower_batches(digits, 3))),
                        model.build_graph, model.get_optimizer)

    def launch():
        trainer.train_with_defaults(monitors=[], extra_callbacks=[], steps_per_epoch=1, max_epoch=1,
                                    session_creator=cpu_session_creator(2, soft_placement))
    if soft_placement:   # the towers' ops would silently share the devices: checked before training
        expected = pytest.raises(ValueError, match=r"tower 2 is on device '/cpu:2', which this session does "
                                                   r"not have .*device_count=\{'CPU': 3\}")
    else:                # TensorFlow refuses to place the ops when the session is initialized
        expected = pytest.raises(tf.errors.InvalidArgumentError, match='CPU:2')
    with expected:
        run_with_timeout(launch)
    assert trainer.global_step == 0


def test_bad_modes_and_gpus_are_errors(monkeypatch):
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '')
    with pytest.raises(ValueError, match="unknown mode 'ring'"):
        SyncMultiGPUTrainerReplicated(cpus(2), mode='ring')
    with pytest.raises(ValueError, match="mode 'nccl' needs GPU towers, but /cpu:0 is not a GPU"):
        SyncMultiGPUTrainerReplicated(cpus(2), mode='nccl')
    for make in (SyncMultiGPUTrainerReplicated, SyncMultiGPUTrainerParameterServer, AsyncMultiGPUTrainer):
        with pytest.raises(ValueError, match=r'tower 0 asks for GPU 0 .* sees 0 GPU'):
            make(2)
    with pytest.raises(ValueError, match="ps_device must be 'cpu' or 'gpu'"):
        SyncMultiGPUTrainerParameterServer(cpus(2), ps_device='tpu')


def test_hierarchical_with_other_than_8_towers_falls_back_with_a_warning(log_records):
    trainer = SyncMultiGPUTrainerReplicated(cpus(2), mode='HIERARCHICAL')
    assert trainer._builder.mode == 'gpu'
    warnings = log_records.messages(logging.WARNING)
    assert any("mode='hierarchical' needs 8 towers, not 2" in m for m in warnings)


def test_several_towers_need_a_feed_free_input(digits):
    trainer = SyncMultiGPUTrainerParameterServer(cpus(2))
    model = DigitsMLPBase()
    with pytest.raises(TypeError, match='feed-free InputSource.*FeedInput would give every tower the same'):
        trainer.setup_graph(model.get_input_signature(), FeedInput(DataFromList(tower_batches(digits, 2))),
                            model.build_graph, model.get_optimizer)


def test_staging_input_keeps_the_order_of_towers(digits, reference):
    k = 2
    trainer = SyncMultiGPUTrainerParameterServer(cpus(k))
    source = StagingInput(QueueInput(DataFromList(tower_batches(digits, k), shuffle=False)))
    recorder = RecordTowerImages()
    values = train_towers(trainer, source, k, DigitsMLPBase(), STEPS, callbacks=[recorder])
    batches = tower_batches(digits, k)
    for step, images in enumerate(recorder.steps):
        for tower, image in enumerate(images):
            np.testing.assert_array_equal(image, batches[step * k + tower][0])
    assert_matches_reference(values, reference(k))


# ----- multi-tower inference --------------------------------------------------------------------

def test_multi_tower_predictors_give_the_numbers_of_the_offline_predictor(digits, log_records):
    images = digits[0][:30]

    def config(k=1):
        return PredictConfig(model=DigitsMLPBase(), input_names=['image'], output_names=['logits'],
                             session_creator=cpu_session_creator(k))
    expected, = OfflinePredictor(config())(images)

    multi = MultiTowerOfflinePredictor(config(2), cpus(2))
    assert len(multi.get_predictors()) == 2
    for k, predictor in enumerate(multi.get_predictors()):
        assert tf.DeviceSpec.from_string(predictor.output_tensors[0].device).device_index == k
        np.testing.assert_allclose(predictor(images)[0], expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(multi(images)[0], expected, rtol=1e-6, atol=1e-6)
    assert multi.get_predictor(3) is multi.get_predictors()[1]
    assert any('round-robin' in m for m in log_records.messages(logging.WARNING))
    assert sorted(v.op.name for v in multi.graph.get_collection(tfv1.GraphKeys.GLOBAL_VARIABLES)) == \
        sorted(MAIN_VARIABLES)

    parallel = DataParallelOfflinePredictor(config(2), cpus(2))
    assert [t.name for t in parallel.input_tensors] == ['tower0_image:0', 'tower1_image:0']
    first, second = parallel(images[:10], images[10:])
    np.testing.assert_allclose(np.concatenate([first, second]), expected, rtol=1e-6, atol=1e-6)

    with pytest.raises(ValueError, match="tower 2 is on device '/cpu:2'"):
        MultiTowerOfflinePredictor(config(2), cpus(3))


def test_data_parallel_inference_runner_matches_the_single_tower_runner(digits):
    images, labels = digits
    test = DataFromList([[images[i:min(i + 32, 1100)], labels[i:min(i + 32, 1100)]]
                         for i in range(1000, 1100, 32)], shuffle=False)
    assert [len(dp[1]) for dp in test.lst] == [32, 32, 32, 4]   # 3 towers: one parallel run + 1 alone
    single = InferenceRunner(test, [ScalarStats('cost'), ClassificationError()])
    parallel = DataParallelInferenceRunner(test, [ScalarStats('cost', prefix='dp'),
                                                  ClassificationError(summary_name='dp_error')], cpus(3))
    trainer = SyncMultiGPUTrainerReplicated(cpus(2))
    model = DigitsMLPBase(lr=0.3)
    trainer.setup_graph(model.get_input_signature(),
                        QueueInput(DataFromList(tower_batches(digits, 2, steps=10), shuffle=False)),
                        model.build_graph, model.get_optimizer)
    trainer.train_with_defaults(callbacks=[single, parallel], monitors=[], extra_callbacks=[],
                                steps_per_epoch=5, max_epoch=2, session_creator=cpu_session_creator(3))
    history = {name: [v for _, v in trainer.monitors.get_history(name)]
               for name in ('validation_cost', 'dp_cost', 'validation_error', 'dp_error')}
    assert len(history['dp_cost']) == 2 and history['validation_cost'][1] < history['validation_cost'][0]
    np.testing.assert_allclose(history['dp_cost'], history['validation_cost'], rtol=1e-6)
    np.testing.assert_allclose(history['dp_error'], history['validation_error'], rtol=1e-6)
    assert [h.ns_name for h in parallel.tower_handles] == ['InferenceTower{}'.format(k) for k in range(3)]
    with pytest.raises(TypeError, match='DataFlow or a QueueInput'):
        DataParallelInferenceRunner(FeedInput(test), [ScalarStats('cost')], cpus(2))


def test_replicated_gives_each_replica_optimizer_state_of_its_own(log_records):
    class AdamMLP(DigitsMLPBase):
        def optimizer(self):
            return tfv1.train.AdamOptimizer(1e-3)

    trainer = SyncMultiGPUTrainerReplicated(cpus(2))
    model = AdamMLP()
    trainer.setup_graph(model.get_input_signature(), QueueInput(DataFromList([[np.zeros((1, 64), 'float32'),
                                                                              np.zeros(1, 'int32')]])),
                        model.build_graph, model.get_optimizer)
    assert not log_records.messages(logging.WARNING)
    # tower 0's power accumulators keep their names; the replica's slots and accumulators are
    # local, synced from the main tower's (tests/graph_builder/test_replica_optimizer.py trains them)
    assert {'apply_gradients/beta1_power', 'apply_gradients/beta2_power'} <= {
        v.op.name for v in tfv1.global_variables()}
    local = sorted(v.op.name for v in tfv1.local_variables())
    assert {'tower1/fc0/W/Adam', 'tower1/fc0/W/Adam_1', 'tower1/apply_gradients/beta1_power',
            'tower1/apply_gradients/beta2_power'} <= set(local)
    assert not [v.op.name for v in tfv1.global_variables() if v.op.name.startswith('tower')]
