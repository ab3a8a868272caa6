"""Mixed precision with the library's own layers and the examples' models: 'fp16' and 'bf16'
train them through the trainers, TensorFlow's rewrite really changes the step's graph (its
casts are in the partition graphs the step ran), an overflowing fp16 step is skipped and
training goes on. Which CPU path 'bf16' took is printed (``-s`` shows it).

On TensorFlow 2.18-2.21, grappler's CPU float16 rewrite run in its default place (after pruning
and common-subgraph elimination) fails on these graphs with ``IndexError:
absl::container_internal::raw_hash_map<>::at``; the library runs it first
(docs/mixed_precision.md). That is CPU-independent: the failing code is the rewrite's, which
runs before any kernel.
"""

import subprocess
import sys

import numpy as np
import pytest

from helpers.breaking_session import BreakingSession
from helpers.paths import REPO_DIR
from helpers.precision import expected_precision_path
from helpers.processes import subprocess_env
from helpers.examples import load_example

from tensorpack_lite import (AvgPooling, BatchNorm, BNReLU, Callback, ConcatWith, Conv2D, Conv2DTranspose,
                             Dropout, FixedUnPooling, FullyConnected, GlobalAvgPooling, InstanceNorm,
                             LayerNorm, LeakyReLU, Maxout, MaxPooling, ModelDesc, PReLU, QueueInput,
                             SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                             launch_train_with_config)
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.precision.mixed_precision import MixedPrecision, MixedPrecisionError
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator

REPO = REPO_DIR
CAST_NAME = {'fp16': 'CastToFp16', 'bf16': 'CastToBf16'}


class StepGraph(Callback):
    """Asks the first step for its partition graphs (the graph after grappler, as run) and
    keeps the names of their nodes; records the trainable variables before and after."""

    def __init__(self):
        self.node_names = None

    def _setup_graph(self):
        self._vars = tfv1.trainable_variables()

    def _before_train(self):
        self.before = self.trainer.sess.run(self._vars)

    def _before_run(self, ctx):
        if self.node_names is None:
            return tfv1.train.SessionRunArgs(None, options=tfv1.RunOptions(output_partition_graphs=True))
        return None

    def _after_run(self, ctx, values):
        if self.node_names is None:
            self.node_names = [n.name for g in values.run_metadata.partition_graphs for n in g.node]

    def _after_train(self):
        self.after = self.trainer.sess.run(self._vars)
        names = ('loss_scale/good_steps', 'loss_scale/skipped_steps')
        counters = [v for v in tfv1.global_variables() if v.op.name in names]
        self.final_loss_scale = self.trainer.sess.run(sorted(counters, key=lambda v: v.op.name))

    def casts(self, mode):
        return [n for n in self.node_names if CAST_NAME[mode] in n]

    def assert_trained(self, mode):
        report = self.trainer.precision_report
        assert report.path == expected_precision_path(mode), report.message
        if report.path == 'float32':
            assert not self.casts(mode), report.message
        else:
            assert self.casts(mode), "the step's graph has no {} cast: the rewrite did nothing".format(mode)
        for var, old, new in zip(self._vars, self.before, self.after):
            assert np.all(np.isfinite(new)), var.name
            assert not np.array_equal(old, new), var.name + " did not change"


class EveryLayer(ModelDesc):
    """Every layer of the library with weights or arithmetic, on 8x8x3 images of unknown batch
    size (so the convolutions' empty-batch guard is in the graph)."""

    def inputs(self):
        return [tf.TensorSpec([None, 8, 8, 3], tf.float32, 'image'), tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        tfv1.set_random_seed(7)   # the same initial weights in every run
        x = Conv2D('conv0', image, 8, 3, activation=BNReLU)
        x = Conv2D('conv1', x, 8, 3, split=2, use_bias=False)
        x = BatchNorm('bn', x)
        x = LeakyReLU('leaky', x, 0.1)
        x = LayerNorm('ln', x)
        # not InstanceNorm right after LayerNorm: it would cancel LayerNorm's per-channel scale
        # and shift, whose gradients would then be zero up to rounding
        x = PReLU('prelu', x)
        x = InstanceNorm('in', x)
        skip = x
        x = MaxPooling('max', x, 2)
        x = Conv2DTranspose('deconv', x, 8, 3, strides=2, activation=tf.nn.relu)
        x = ConcatWith('concat', x, [skip], 3)
        x = AvgPooling('avg', x, 2)
        x = FixedUnPooling('unpool', x, 2)
        x = Maxout('maxout', x, 2)
        pooled = GlobalAvgPooling('gap', x)
        hidden = FullyConnected('fc0', tf.concat([pooled, tf.reshape(x, [-1, 8 * 8 * 8])], 1), 16,
                                activation=tf.nn.relu)
        hidden = Dropout('drop', hidden, rate=0.1)
        logits = FullyConnected('fc1', hidden, 5)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                              name='cost')

    def optimizer(self):
        return tfv1.train.MomentumOptimizer(0.05, 0.9)


def image_batches(num, batch=4, shape=(8, 8, 3), classes=5, overflow_batch=None, seed=0):
    rng = np.random.RandomState(seed)
    data = []
    for i in range(num):
        images = rng.rand(batch, *shape).astype(np.float32)
        if i == overflow_batch:
            images[0] = 1e30
        data.append([images, rng.randint(0, classes, batch).astype(np.int32)])
    return DataFromList(data, shuffle=False)


def train(model, dataflow, mode, callbacks=(), trainer=None, **config):
    launch_train_with_config(TrainConfig(model=model, dataflow=dataflow, callbacks=list(callbacks),
                                         max_epoch=1, mixed_precision=mode, monitors=[], **config),
                             trainer or SimpleTrainer())


@pytest.mark.parametrize('source', ['feed', 'queue'])
@pytest.mark.parametrize('mode', ['fp16', 'bf16'])
def test_every_layer_trains(mode, source, say_machine_fact):
    probe = StepGraph()
    dataflow = image_batches(4)
    config = {'data': QueueInput(dataflow)} if source == 'queue' else {'dataflow': dataflow}
    model = EveryLayer()
    launch_train_with_config(TrainConfig(model=model, callbacks=[probe], max_epoch=1, steps_per_epoch=4,
                                         mixed_precision=mode, monitors=[], **config), SimpleTrainer())
    probe.assert_trained(mode)
    say_machine_fact("every layer in {}: the '{}' path".format(mode, probe.trainer.precision_report.path))


def test_fp16_with_the_layers_skips_an_overflowing_step_and_goes_on():
    probe = StepGraph()

    class Scale(Callback):
        def _setup_graph(self):
            self.vars = [v for v in tfv1.global_variables() if v.op.name.startswith('loss_scale/')]

        def _trigger_step(self):
            self.values = dict(zip([v.op.name for v in self.vars], self.trainer.sess.run(self.vars)))

    scale = Scale()
    train(EveryLayer(), image_batches(4, overflow_batch=1), MixedPrecision('fp16', initial_scale=1024),
          callbacks=[probe, scale])
    probe.assert_trained('fp16')
    assert scale.values['loss_scale/skipped_steps'] == 1 and scale.values['loss_scale/scale'] == 512


class BreakingSessionCreator(NewSessionCreator):
    """Its session fails the first build of ``trainer.train_op`` inside TensorFlow, as a
    rewrite that TensorFlow cannot apply does."""

    def __init__(self, trainer):
        super().__init__()
        self.trainer = trainer
        self.session = None

    def create_session(self):
        self.session = BreakingSession.convert(super().create_session(), self.trainer.train_op, 1,
                                               when_built=True)
        return self.session


def test_a_rewrite_tensorflow_cannot_apply_is_refused_before_the_first_step():
    trainer = SimpleTrainer()
    creator = BreakingSessionCreator(trainer)
    config = TrainConfig(model=EveryLayer(), dataflow=image_batches(2), max_epoch=1, mixed_precision='fp16',
                         monitors=[], session_creator=creator)
    try:
        with pytest.raises(MixedPrecisionError,
                           match=r"mixed_precision='fp16'.*IndexError: absl.*Nothing was trained.*'bf16'"):
            launch_train_with_config(config, trainer)
        assert trainer.sess._closed
        assert trainer.loop.schedule is None     # the loop never started: no step ran
    finally:
        creator.session.release.set()


# ----- the examples' models -------------------------------------------------------------------

def labelled(shape, classes=10, num=3, batch=4):
    return image_batches(num, batch=batch, shape=shape, classes=classes)


@pytest.mark.parametrize('mode', ['fp16', 'bf16'])
@pytest.mark.parametrize('example', ['mnist-convnet', 'cifar-convnet', 'cifar10-resnet'])
def test_example_models_train(example, mode):
    if example == 'mnist-convnet':
        module = load_example('examples/basics/mnist-convnet.py')
        model, data = module.Model(), labelled((module.IMAGE_SIZE, module.IMAGE_SIZE))
    elif example == 'cifar-convnet':
        module = load_example('examples/basics/cifar-convnet.py')
        model, data = module.Model(10), labelled((module.CROP, module.CROP, 3))
    else:
        model, data = load_example('examples/ResNet/cifar10-resnet.py').Model(n=1), labelled((32, 32, 3))
    probe = StepGraph()
    train(model, data, mode, callbacks=[probe])
    probe.assert_trained(mode)


@pytest.mark.parametrize('mode', ['fp16', 'bf16'])
def test_multigpu_example_model_on_two_replicated_towers(mode):
    module = load_example('examples/multigpu/multigpu-digits.py')
    probe = StepGraph()
    trainer = SyncMultiGPUTrainerReplicated(['/cpu:0', '/cpu:1'], mode='cpu')
    train(module.Model(), labelled((8, 8), num=4), mode, callbacks=[probe], trainer=trainer,
          session_creator=NewSessionCreator(config=tfv1.ConfigProto(device_count={'CPU': 2})),
          steps_per_epoch=2)
    probe.assert_trained(mode)
    values = dict(zip([v.op.name for v in probe._vars], probe.after))
    np.testing.assert_array_equal(values['tower1/conv0/W'], values['conv0/W'])   # replicas agree


def gan_images():
    return QueueInput(DataFromList([[np.random.RandomState(i).uniform(-1, 1, (4, 8, 8)).astype(np.float32)]
                                    for i in range(3)], shuffle=False))


def test_gan_example_trainer_in_fp16_scales_both_players_losses():
    """GANTrainer(mixed_precision='fp16'): the session rewrite, both optimizers wrapped in one
    loss scale, its update after the step."""
    dcgan = load_example('examples/GAN/DCGAN.py')
    gan = sys.modules['GAN']
    trainer = gan.GANTrainer(gan_images(), dcgan.Model(8, 4, 8, nf=8), mixed_precision='fp16')
    probe = StepGraph()
    trainer.train_with_defaults(callbacks=[probe], monitors=[], steps_per_epoch=3, max_epoch=1)
    probe.assert_trained('fp16')
    scale = {v.op.name: v for v in tfv1.global_variables() if v.op.name.startswith('loss_scale/')}
    assert set(scale) == {'loss_scale/scale', 'loss_scale/good_steps', 'loss_scale/skipped_steps'}
    # the scale's update ran after each of the 3 steps, none skipped
    assert dict(zip(['good', 'skipped'], probe.final_loss_scale)) == {'good': 3, 'skipped': 0}


def test_separate_gan_trainer_refuses_fp16_and_takes_bf16():
    dcgan = load_example('examples/GAN/DCGAN.py')
    gan = sys.modules['GAN']
    with pytest.raises(ValueError, match="SeparateGANTrainer: mixed_precision='fp16'.*GANTrainer.*'bf16'"):
        gan.SeparateGANTrainer(gan_images(), dcgan.Model(8, 4, 8, nf=8), d_period=3, mixed_precision='fp16')
    with tfv1.Graph().as_default():
        trainer = gan.SeparateGANTrainer(gan_images(), dcgan.Model(8, 4, 8, nf=8), d_period=3,
                                         mixed_precision='bf16')
        probe = StepGraph()
        trainer.train_with_defaults(callbacks=[probe], monitors=[], steps_per_epoch=3, max_epoch=1)
        probe.assert_trained('bf16')


def test_the_main_example_trains_in_fp16(tmp_path):
    """The README's first command's example, with --mixed-precision fp16."""
    out = subprocess.run(
        [sys.executable, 'examples/basics/mnist-convnet.py', '--mixed-precision', 'fp16', '--max-epoch', '2',
         '--steps-per-epoch', '8', '--logdir', str(tmp_path / 'log')],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env=subprocess_env())
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    accuracy = float(out.stdout.rsplit('Final validation accuracy:', 1)[1].split()[0])
    assert accuracy > 0.3, accuracy     # 16 steps of 64 digits: far above chance (0.1)
    assert 'loss_scale/skipped_steps' in open(tmp_path / 'log' / 'stats.json').read()
