"""Replicated training with every optimizer: K towers of batch b make the update of one tower on
batch K*b, because every replica has optimizer state of its own (Adam's power accumulators,
AccumGradOptimizer's counter...), advanced once per step and synced from tower 0's, whose
names are those of tensorpack; resuming from a checkpoint keeps it so."""

import logging
import os

import numpy as np
import pytest

from tensorpack_lite.callbacks import ModelSaver
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.graph_builder.replica_optimizer import apply_on_replicas, copy_optimizer_without_state
from tensorpack_lite.input_source import FeedInput, QueueInput
from tensorpack_lite.tfutils.gradproc import GlobalNormClip, MapGradient
from tensorpack_lite.tfutils.optimizer import AccumGradOptimizer, apply_grad_processors
from tensorpack_lite.tfutils.sessinit import SaverRestore
from tensorpack_lite.train import ModelDesc, SimpleTrainer, SyncMultiGPUTrainerReplicated

from helpers.graphs import ReadAllVariables, cpus
from helpers.multigpu import cpu_session_creator, train_towers

BATCH = 3      # per tower
STEPS = 5
FEATURES = 4

OPTIMIZERS = {
    'gradient-descent': lambda lr: tfv1.train.GradientDescentOptimizer(lr),
    'momentum': lambda lr: tfv1.train.MomentumOptimizer(lr, 0.9, use_nesterov=True),
    'adam': lambda lr: tfv1.train.AdamOptimizer(lr),
    'rmsprop': lambda lr: tfv1.train.RMSPropOptimizer(lr, momentum=0.5, centered=True),
    'adagrad': lambda lr: tfv1.train.AdagradOptimizer(lr),
    'adadelta': lambda lr: tfv1.train.AdadeltaOptimizer(lr * 10),
    'ftrl': lambda lr: tfv1.train.FtrlOptimizer(lr, l1_regularization_strength=0.01),
    'accum-grad-adam': lambda lr: AccumGradOptimizer(tfv1.train.AdamOptimizer(lr), niter=2),
    'gradproc-adam': lambda lr: apply_grad_processors(
        tfv1.train.AdamOptimizer(lr), [GlobalNormClip(0.5), MapGradient(lambda g: g * 2.0)]),
}


def initial_weights():
    rng = np.random.RandomState(1)
    return {'fc0/W': rng.randn(FEATURES, 3).astype('float32'), 'fc0/b': rng.randn(3).astype('float32') * 0.1,
            'fc1/W': rng.randn(3, 1).astype('float32')}


INITIAL = initial_weights()


class TinyRegression(ModelDesc):
    """4 -> 3 (tanh) -> 1, mean squared error, the optimizer made by ``make_optimizer(lr)``
    with the learning rate in a variable (shared by the replicas, as a hyper-parameter)."""

    def __init__(self, make_optimizer):
        self.make_optimizer = make_optimizer

    def inputs(self):
        return [tf.TensorSpec([None, FEATURES], tf.float32, 'x'), tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y):
        w0, b0, w1 = [tfv1.get_variable(name, initializer=value) for name, value in initial_weights().items()]
        pred = tf.squeeze(tf.matmul(tf.tanh(tf.matmul(x, w0) + b0), w1), 1)
        return tf.reduce_mean(tf.square(pred - y), name='cost')

    def optimizer(self):
        lr = tfv1.get_variable('learning_rate', initializer=0.1, trainable=False)
        return self.make_optimizer(lr)


def tower_batches(k, steps=STEPS):
    """[x, y] of tower i at step s is datapoint s*k+i."""
    rng = np.random.RandomState(0)
    return [[rng.randn(BATCH, FEATURES).astype('float32'), rng.randn(BATCH).astype('float32')]
            for _ in range(k * steps)]


def concatenated(batches, k):
    return [[np.concatenate([b[c] for b in batches[s * k:(s + 1) * k]]) for c in range(2)]
            for s in range(len(batches) // k)]


def single_tower(name, k, steps=STEPS):
    """SimpleTrainer's variables after ``steps`` steps on the K towers' batches concatenated."""
    with tfv1.Graph().as_default():
        source = FeedInput(DataFromList(concatenated(tower_batches(k, steps), k), shuffle=False))
        return train_towers(SimpleTrainer(), source, 1, TinyRegression(OPTIMIZERS[name]), steps)


def replicated(name, k, steps=STEPS, callbacks=()):
    """SyncMultiGPUTrainerReplicated's variables after ``steps`` steps of K towers."""
    with tfv1.Graph().as_default():
        trainer = SyncMultiGPUTrainerReplicated(cpus(k))
        trainer.BROADCAST_EVERY_EPOCH = False   # the replicas must stay equal by themselves
        source = QueueInput(DataFromList(tower_batches(k, steps), shuffle=False))
        return train_towers(trainer, source, k, TinyRegression(OPTIMIZERS[name]), steps, callbacks=callbacks)


def assert_every_replica_equals_tower0(values, k):
    """Every variable of replica k (model and optimizer state) equals tower 0's."""
    replicas = [n for n in values if n.startswith('tower')]
    assert {n.split('/', 1)[0] for n in replicas} == {'tower{}'.format(i) for i in range(1, k)}
    for name in replicas:
        np.testing.assert_array_equal(values[name], values[name.split('/', 1)[1]], err_msg=name)


@pytest.mark.parametrize('k', [2, 4])
@pytest.mark.parametrize('name', sorted(OPTIMIZERS))
def test_k_towers_make_the_update_of_one_tower_on_k_batches(name, k):
    values = replicated(name, k)
    reference = single_tower(name, k)
    for var in INITIAL:
        assert np.abs(values[var] - INITIAL[var]).max() > 1e-3, "{} did not train".format(var)
        np.testing.assert_allclose(values[var], reference[var], rtol=0, atol=1e-5, err_msg=var)
    assert_every_replica_equals_tower0(values, k)


def test_each_replica_advances_its_own_adam_and_accumulation_state_once_per_step():
    values = replicated('accum-grad-adam', 2)
    # AccumGradOptimizer(Adam, 2): Adam updates at steps 2 and 4, the counter counts all 5
    for prefix in ('', 'tower1/'):
        assert values[prefix + 'apply_gradients/AccumGrad/counter'] == 5
        np.testing.assert_allclose([values[prefix + 'beta1_power'], values[prefix + 'beta2_power']],
                                   [0.9 ** 3, 0.999 ** 3], rtol=1e-6)
    values = replicated('adam', 4)
    for i in range(4):
        prefix = 'tower{}/'.format(i) if i else ''
        np.testing.assert_allclose(values[prefix + 'apply_gradients/beta1_power'], 0.9 ** (STEPS + 1),
                                   rtol=1e-6)


def test_tower0_keeps_tensorpack_names_and_replica_state_is_local_under_its_tower(log_records):
    model = TinyRegression(OPTIMIZERS['accum-grad-adam'])
    trainer = SyncMultiGPUTrainerReplicated(cpus(3))
    trainer.setup_graph(model.get_input_signature(), QueueInput(DataFromList(tower_batches(3))),
                        model.build_graph, model.get_optimizer)
    global_names = {v.op.name for v in tfv1.global_variables()}
    state = ['apply_gradients/AccumGrad/counter', 'beta1_power', 'beta2_power', 'fc0/W/AccumGrad',
             'fc0/W/Adam', 'fc0/W/Adam_1']
    assert set(state) <= global_names and not [n for n in global_names if n.startswith('tower')]
    local_names = {v.op.name for v in tfv1.local_variables()}
    assert {'tower{}/{}'.format(i, n) for i in (1, 2) for n in state} <= local_names
    replicas = {n for n in local_names if n.startswith('tower')}
    assert len(replicas) == 2 * (3 + 3 * 3 + 3)   # model, slots (accumulator, Adam's two), state
    assert local_names - replicas == {'QueueInput/dequeued'}   # what training consumed of the queue
    # the post-init op copies all of tower 0's into the replicas'
    assert "'sync_variables_from_main_tower' copies 30 variables." in log_records.messages()
    assert not log_records.messages(logging.WARNING)


def test_adam_resumed_from_a_checkpoint_continues_as_an_uninterrupted_run(logdir):
    k, first = 2, 2
    replicated('adam', k, steps=first, callbacks=[ModelSaver()])
    checkpoint = os.path.join(logdir, 'model-{}'.format(first))
    with tfv1.Graph().as_default():
        trainer = SyncMultiGPUTrainerReplicated(cpus(k))
        trainer.BROADCAST_EVERY_EPOCH = False
        model = TinyRegression(OPTIMIZERS['adam'])
        batches = tower_batches(k)[first * k:]
        trainer.setup_graph(model.get_input_signature(), QueueInput(DataFromList(batches, shuffle=False)),
                            model.build_graph, model.get_optimizer)
        readback = ReadAllVariables()
        trainer.train_with_defaults(
            monitors=[], extra_callbacks=[], steps_per_epoch=STEPS - first, max_epoch=2, starting_epoch=2,
            session_init=SaverRestore(checkpoint), session_creator=cpu_session_creator(k),
            callbacks=[readback])
    values = readback.values
    assert values['global_step'] == STEPS
    reference = single_tower('adam', k)
    for var in INITIAL:
        np.testing.assert_allclose(values[var], reference[var], rtol=0, atol=1e-5, err_msg=var)
    assert_every_replica_equals_tower0(values, k)


def test_replica_optimizers_are_copies_sharing_hyperparameters_but_no_state():
    lr = tfv1.get_variable('learning_rate', initializer=0.1, trainable=False)
    opt = OPTIMIZERS['gradproc-adam'](lr)
    twin = copy_optimizer_without_state(opt)
    assert type(twin) is type(opt) and twin._gradprocs is opt._gradprocs
    assert type(twin._opt) is type(opt._opt) and twin._opt is not opt._opt and twin._opt._lr is lr
    main = tfv1.get_variable('w', initializer=[1.0, 2.0])
    with tfv1.variable_scope('tower1'):
        replica = tfv1.get_variable('w', initializer=[1.0, 2.0])
    grad = tf.constant([1.0, 1.0])
    apply_on_replicas(opt, [[(grad, main)], [(grad, replica)]], cpus(1) * 2)
    assert twin._opt.variables() == []   # apply_on_replicas made copies of its own
    assert sorted(v.op.name for v in opt._opt.variables()) == [
        'beta1_power', 'beta2_power', 'w/Adam', 'w/Adam_1']
    assert sorted(v.op.name for v in tfv1.local_variables()) == [
        'tower1/beta1_power', 'tower1/beta2_power', 'tower1/w/Adam', 'tower1/w/Adam_1']


@pytest.mark.parametrize('tower0_extra, replica_extra, message', [
    (None, 0, "replica 1 creates more than 0 variables, tower 0's creates 0 \\(none\\)"),
    (0.0, None, "replica 1 creates 0 variables, tower 0's creates 1 \\(apply_gradients/extra\\)"),
    (0.0, 0, "tower1/apply_gradients/extra \\(int32, \\(\\)\\) does not match tower 0's "
             "apply_gradients/extra \\(float32"),
])
def test_a_replica_optimizer_creating_other_variables_than_tower0s_is_an_error(
        tower0_extra, replica_extra, message):
    class ExtraVariable(tfv1.train.GradientDescentOptimizer):
        """Creates a variable of initial value ``tower0_extra`` or ``replica_extra`` (None: none)."""
        def apply_gradients(self, grads_and_vars, global_step=None, name=None):
            pairs = list(grads_and_vars)
            extra = replica_extra if pairs[0][1].op.name.startswith('tower') else tower0_extra
            if extra is not None:
                tfv1.Variable(extra, name='extra')
            return super().apply_gradients(pairs, name=name)

    main = tfv1.get_variable('w', initializer=1.0)
    replica = tfv1.get_variable('tower1/w', initializer=1.0)
    with pytest.raises(ValueError, match=message), tf.name_scope('apply_gradients'):
        apply_on_replicas(ExtraVariable(0.1), [[(tf.constant(1.0), main)], [(tf.constant(1.0), replica)]],
                          cpus(1) * 2)
