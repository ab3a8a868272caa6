"""ModelDesc + TrainConfig + launch_train_with_config on SimpleTrainer, through every
InputSource, on the real 8x8 digits scikit-learn ships."""

import functools
import json
import os
import threading

import numpy as np
import pytest
import zmq

from tensorpack_lite.callbacks import Callback
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.input_source import (
    BatchQueueInput, FeedInput, QueueInput, StagingInput, TensorInput, TFDatasetInput, ZMQInput)
from tensorpack_lite.predict import OfflinePredictor, PredictConfig
from tensorpack_lite.train import (
    ModelDesc, NoOpTrainer, QueueInputTrainer, SimpleTrainer, TrainConfig, launch_train_with_config)
from tensorpack_lite.utils.serialize import dumps

from helpers.callbacks import AssignValues, RecordCost
from helpers.dataflows import labelled_batches
from helpers.models import DigitsMLPBase
from helpers.timing import HANG_TIMEOUT, run_or_hang
from helpers.models import LineRegression


class DigitsMLP(DigitsMLPBase):
    """The shared digits MLP, 64 hidden units by default and seed 7, averaging its cost and
    'accuracy'."""

    def __init__(self, hidden=64, lr=0.05):
        super().__init__(hidden, lr, seed=7, summary=('cost', 'accuracy'))


BATCH = 32


batches_dataflow = functools.partial(labelled_batches, batch=BATCH)


class TrainingAccuracy(Callback):
    """After training, the accuracy over the given data, through an inference tower."""

    def __init__(self, images, labels):
        self.images, self.labels = images, labels

    def _setup_graph(self):
        self.predictor = self.trainer.get_predictor(['image'], ['logits'])

    def _after_train(self):
        logits, = self.predictor(self.images)
        self.accuracy = float(np.mean(np.argmax(logits, 1) == self.labels))


@pytest.mark.quick
def test_digits_mlp_reaches_90_percent(digits, logdir):
    images, labels = digits
    model = DigitsMLP(lr=0.3)
    accuracy = TrainingAccuracy(images, labels)
    config = TrainConfig(model=model, dataflow=batches_dataflow(images, labels, shuffle=True),
                         callbacks=[accuracy], max_epoch=4)
    assert config.steps_per_epoch == len(images) // BATCH
    trainer = SimpleTrainer()
    launch_train_with_config(config, trainer)
    assert accuracy.accuracy >= 0.9
    stats = json.load(open(os.path.join(logdir, 'stats.json')))
    assert [s['epoch_num'] for s in stats] == [1, 2, 3, 4]
    assert stats[-1]['accuracy'] > 0.85 and stats[-1]['cost'] < stats[0]['cost']
    assert trainer.global_step == 4 * config.steps_per_epoch
    # training tower '' plus the inference tower built by get_predictor
    assert model.contexts == [(True, ''), (False, 'tower-pred-0')]
    assert [t.ns_name for t in trainer.towers.training()] == ['']
    assert [v.name for v in tfv1.trainable_variables()] == ['fc0/W:0', 'fc0/b:0', 'fc1/W:0', 'fc1/b:0']


def _zmq_input(images, labels, steps):
    endpoint = 'ipc://' + os.path.join('/tmp', 'tp-lite-test-{}'.format(os.getpid()))
    source = ZMQInput(endpoint, hwm=10, bind=True)

    def send():
        df = batches_dataflow(images, labels)
        df.reset_state()
        sock = zmq.Context.instance().socket(zmq.PUSH)
        sock.connect(endpoint)
        sent = 0
        while sent < steps:
            for x, y in df:
                if sent == steps:
                    break
                sock.send(dumps([x, y]))
                sent += 1
        sock.close(linger=2000)

    sender = threading.Thread(target=send, daemon=True)
    return source, sender


def _tensor_input(images, labels):
    def make_tensors():
        dataset = tf.data.Dataset.from_tensor_slices((images, labels)).batch(BATCH, drop_remainder=True)
        return list(tfv1.data.make_one_shot_iterator(dataset.repeat()).get_next())
    return TensorInput(make_tensors, size=len(images) // BATCH)


def _dataset_input(images, labels):
    df = batches_dataflow(images, labels)
    dataset = TFDatasetInput.dataflow_to_dataset(df, (tf.float32, tf.int32)).repeat()
    return TFDatasetInput(dataset)


SOURCES = ['feed', 'queue', 'batchqueue', 'tensor', 'tfdataset', 'staging', 'zmq']


@pytest.mark.parametrize('kind', SOURCES)
def test_every_input_source_gives_the_same_loss_curve(digits, kind):
    images, labels = digits
    images, labels = images[:320], labels[:320]
    steps_per_epoch, epochs = 10, 2
    sender = None
    if kind == 'feed':
        source = FeedInput(batches_dataflow(images, labels))
    elif kind == 'queue':
        source = QueueInput(batches_dataflow(images, labels))
    elif kind == 'batchqueue':
        source = BatchQueueInput(DataFromList([[x, y] for x, y in zip(images, labels)], shuffle=False), BATCH)
    elif kind == 'tensor':
        source = _tensor_input(images, labels)
    elif kind == 'tfdataset':
        source = _dataset_input(images, labels)
    elif kind == 'staging':
        source = StagingInput(QueueInput(batches_dataflow(images, labels)))
    else:
        source, sender = _zmq_input(images, labels, steps_per_epoch * epochs + 5)
    recorder = RecordCost()
    config = TrainConfig(model=DigitsMLP(), data=source, callbacks=[recorder], monitors=[],
                         steps_per_epoch=steps_per_epoch, max_epoch=epochs)
    if sender is not None:
        sender.start()
    launch_train_with_config(config, SimpleTrainer())
    assert len(recorder.costs) == steps_per_epoch * epochs
    reference = _reference_curve(images, labels, steps_per_epoch * epochs)
    np.testing.assert_allclose(recorder.costs, reference, rtol=0, atol=1e-5)
    assert reference[-1] < reference[0]


_REFERENCE = {}


def _reference_curve(images, labels, steps):
    """The costs of plain full-batch-sequence gradient descent on the same batches, computed
    with a bare session loop (no trainer, no InputSource)."""
    key = (len(images), steps)
    if key not in _REFERENCE:
        with tfv1.Graph().as_default():
            model = DigitsMLP()
            from tensorpack_lite.tfutils.tower import TrainTowerContext
            image = tfv1.placeholder(tf.float32, [None, 64])
            label = tfv1.placeholder(tf.int32, [None])
            with TrainTowerContext(''):
                cost = model.build_graph(image, label)
            train_op = model.get_optimizer().minimize(cost)
            costs = []
            with tfv1.Session() as sess:
                sess.run(tfv1.global_variables_initializer())
                ds = batches_dataflow(images, labels)
                ds.reset_state()
                while len(costs) < steps:
                    for x, y in ds:
                        if len(costs) == steps:
                            break
                        c, _ = sess.run([cost, train_op], {image: x, label: y})
                        costs.append(float(c))
        _REFERENCE[key] = costs
    return _REFERENCE[key]


def test_trainconfig_checks_its_arguments(digits):
    images, labels = digits
    df = batches_dataflow(images, labels)
    with pytest.raises(ValueError, match='not both'):
        TrainConfig(dataflow=df, data=FeedInput(df))
    with pytest.raises(TypeError, match='dataflow'):
        TrainConfig(dataflow=[1, 2, 3])
    with pytest.raises(TypeError, match=r'callbacks\[0\]'):
        TrainConfig(dataflow=df, callbacks=['saver'])
    with pytest.raises(TypeError, match='model'):
        TrainConfig(dataflow=df, model=object())
    with pytest.raises(ValueError, match='steps_per_epoch'):
        TrainConfig(dataflow=df, steps_per_epoch=0)
    with pytest.raises(ValueError, match='max_epoch'):
        TrainConfig(dataflow=df, starting_epoch=3, max_epoch=2)
    with pytest.raises(ValueError, match='size of TensorInput is not known'):
        TrainConfig(data=TensorInput(lambda: []))
    with pytest.raises(TypeError, match='SingleCostTrainer'):
        from tensorpack_lite.train import Trainer
        launch_train_with_config(TrainConfig(model=DigitsMLP(), dataflow=df), Trainer())


def test_model_desc_errors():
    class NoName(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None], tf.float32)]

    class Dup(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None], tf.float32, 'x'), tf.TensorSpec([None], tf.int32, 'x')]

    class OldStyle(ModelDesc):
        def inputs(self):
            return [tfv1.placeholder(tf.float32, [None, 3], 'x')]

        def optimizer(self):
            return 'sgd'

    with pytest.raises(ValueError, match='no name'):
        NoName().get_input_signature()
    with pytest.raises(ValueError, match="duplicate names \\['x'\\]"):
        Dup().get_input_signature()
    spec, = OldStyle().get_input_signature()
    assert spec.name == 'x' and spec.shape.as_list() == [None, 3]
    assert OldStyle().input_names == ['x']
    with pytest.raises(TypeError, match='tf.compat.v1.train.Optimizer'):
        OldStyle().get_optimizer()


def test_cost_must_be_a_scalar(digits):
    images, labels = digits

    class VectorCost(DigitsMLP):
        def build_graph(self, image, label):
            return tf.reduce_sum(image, axis=1)

    config = TrainConfig(model=VectorCost(), dataflow=batches_dataflow(images, labels), max_epoch=1)
    with pytest.raises(ValueError, match='must be a scalar'):
        launch_train_with_config(config, SimpleTrainer())


def test_noop_trainer_only_runs_callbacks(digits):
    images, labels = digits

    class Weights(Callback):
        def _before_train(self):
            self.before = self.trainer.sess.run('fc0/W:0')

        def _after_train(self):
            self.after = self.trainer.sess.run('fc0/W:0')

    weights = Weights()
    config = TrainConfig(model=DigitsMLP(), dataflow=batches_dataflow(images[:64], labels[:64]),
                         callbacks=[weights], monitors=[], max_epoch=2)
    trainer = NoOpTrainer()
    launch_train_with_config(config, trainer)
    assert trainer.global_step == 4
    np.testing.assert_array_equal(weights.before, weights.after)


def test_queue_input_trainer_requires_queue_input(digits):
    images, labels = digits
    df = batches_dataflow(images[:64], labels[:64])
    with pytest.raises(TypeError, match='QueueInput'):
        launch_train_with_config(TrainConfig(model=DigitsMLP(), data=FeedInput(df), max_epoch=1),
                                 QueueInputTrainer())
    recorder = RecordCost()
    launch_train_with_config(TrainConfig(model=DigitsMLP(), dataflow=df, callbacks=[recorder],
                                         monitors=[], max_epoch=2), QueueInputTrainer())
    assert len(recorder.costs) == 4 and recorder.costs[-1] < recorder.costs[0]


@pytest.fixture(autouse=True)
def _patient_thread_join(monkeypatch):
    """The enqueue threads get as long as they need to end after training (a thread slowed down by
    CPU load is no error), so that the tests can check that they did end."""
    for cls in (QueueInput, ZMQInput):
        monkeypatch.setattr(cls, 'thread_join_timeout', HANG_TIMEOUT)


def _enqueue_threads():
    return [t for t in threading.enumerate() if t.name.startswith('EnqueueThread') and t.is_alive()]


class BadDataFlow(DataFromList):
    """Good batches, then one bad datapoint made by ``spoil``."""

    def __init__(self, images, labels, spoil, good=3):
        points = [[images[i * BATCH:(i + 1) * BATCH], labels[i * BATCH:(i + 1) * BATCH]] for i in range(good)]
        points.append(spoil(images[:BATCH], labels[:BATCH]))
        super().__init__(points, shuffle=False)


BAD_DATAPOINTS = {
    'components': (lambda x, y: [x], ValueError, r"has 1 components but there are 2 inputs \(image, label\)"),
    'dtype': (lambda x, y: [x.astype('complex64'), y], TypeError,
              r"component 0 of the datapoint has dtype complex64, but input 'image' is float32"),
    'fraction': (lambda x, y: [x, (y + 0.5).astype('float32')], ValueError,
                 r"component 1 of the datapoint \(float32\) holds \d+\.5, which is not a whole number, "
                 r"but input 'label' is int32"),
    'shape': (lambda x, y: [x[:, :60], y], ValueError,
              r"component 0 of the datapoint has shape \(32, 60\), which does not fit input 'image' "
              r"of shape \(None, 64\)"),
}


@pytest.mark.parametrize('trainer_cls', [SimpleTrainer, QueueInputTrainer])
@pytest.mark.parametrize('bad', sorted(BAD_DATAPOINTS))
def test_bad_datapoint_is_a_clear_error_and_nothing_hangs(digits, bad, trainer_cls):
    images, labels = digits
    spoil, error, message = BAD_DATAPOINTS[bad]
    recorder = RecordCost()
    config = TrainConfig(model=DigitsMLP(), dataflow=BadDataFlow(images, labels, spoil), callbacks=[recorder],
                         monitors=[], steps_per_epoch=10, max_epoch=1)
    with pytest.raises(error, match=message):
        run_or_hang(launch_train_with_config, config, trainer_cls())
    assert len(recorder.costs) == 3  # the good batches were trained on, then it stopped
    assert _enqueue_threads() == []


def test_queue_threads_end_with_the_trainer(digits):
    images, labels = digits
    config = TrainConfig(model=DigitsMLP(), dataflow=batches_dataflow(images, labels), monitors=[],
                         steps_per_epoch=5, max_epoch=2)
    trainer = QueueInputTrainer()
    launch_train_with_config(config, trainer)
    assert trainer.global_step == 10
    assert _enqueue_threads() == []


def test_model_errors_are_clear(digits):
    images, labels = digits

    class NoCost(DigitsMLP):
        def build_graph(self, image, label):
            super().build_graph(image, label)

    class BadOptimizer(DigitsMLP):
        def optimizer(self):
            return 0.01

    df = batches_dataflow(images, labels)
    with pytest.raises(TypeError, match='must return the cost tensor, got None'):
        launch_train_with_config(TrainConfig(model=NoCost(), dataflow=df, max_epoch=1), SimpleTrainer())
    with tfv1.Graph().as_default():
        with pytest.raises(TypeError, match=r'BadOptimizer.optimizer\(\) must return a tf.compat.v1'):
            launch_train_with_config(TrainConfig(model=BadOptimizer(), dataflow=df, max_epoch=1),
                                     SimpleTrainer())

    from tensorpack_lite.dataflow import DataFromGenerator
    unsized = DataFromGenerator(lambda: iter([[images[:BATCH], labels[:BATCH]]]))
    with pytest.raises(ValueError, match='needs steps_per_epoch: the size of DataFromGenerator is not known'):
        TrainConfig(model=DigitsMLP(), dataflow=unsized)


def test_offline_predictor_matches_the_training_tower(digits):
    images, labels = digits

    class Snapshot(Callback):
        def _after_train(self):
            sess = self.trainer.sess
            self.values = {v.op.name: sess.run(v) for v in tfv1.trainable_variables()}
            tower = self.trainer.towers.training()[0]
            self.logits = sess.run(tower['logits'], {tower['image']: images[:100]})

    snapshot = Snapshot()
    trained = DigitsMLP()
    dataflow = batches_dataflow(images, labels, shuffle=True)
    launch_train_with_config(TrainConfig(model=trained, dataflow=dataflow,
                                         callbacks=[snapshot], monitors=[], max_epoch=2), SimpleTrainer())
    assert trained.contexts == [(True, '')]  # the tower function ran once for the one tower

    model = DigitsMLP()
    predictor = OfflinePredictor(PredictConfig(model=model, input_names=['image'], output_names=['logits'],
                                               session_init=AssignValues(snapshot.values)))
    logits, = predictor(images[:100])
    np.testing.assert_allclose(logits, snapshot.logits, rtol=0, atol=1e-5)
    assert model.contexts == [(False, '')]
    assert len(predictor.sess.graph.get_collection(tfv1.GraphKeys.TRAINABLE_VARIABLES)) == 4


def test_online_predictor_towers_reuse_variables(digits):
    images, labels = digits

    class Build(Callback):
        def _setup_graph(self):
            before = list(tfv1.trainable_variables())
            self.predictor = self.trainer.get_predictor(['image'], ['logits'])
            self.same = self.trainer.get_predictor(['image'], ['logits'])
            self.new_variables = [v for v in tfv1.trainable_variables() if v not in before]

        def _after_train(self):
            tower = self.trainer.towers.training()[0]
            self.expected = self.trainer.sess.run(tower['logits'], {tower['image']: images[:10]})
            self.got, = self.predictor(images[:10])

    build = Build()
    model = DigitsMLP()
    launch_train_with_config(TrainConfig(model=model, dataflow=batches_dataflow(images[:128], labels[:128]),
                                         callbacks=[build], monitors=[], max_epoch=1), SimpleTrainer())
    assert build.new_variables == []
    assert build.same is build.predictor
    assert model.contexts == [(True, ''), (False, 'tower-pred-0')]
    np.testing.assert_allclose(build.got, build.expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize('xla', [False, True])
def test_xla_compile_gives_the_same_updates(xla):
    """SingleCostTrainer.XLA_COMPILE compiles the tower's forward and backward pass."""

    class Weights(Callback):
        def _setup_graph(self):
            self.var = [v for v in tfv1.global_variables() if v.op.name == 'w'][0]

        def _after_train(self):
            self.value = self.trainer.sess.run(self.var)

    class XLATrainer(SimpleTrainer):
        XLA_COMPILE = xla

    weights = Weights()
    points = [[np.full(4, 0.5, 'float32')] for _ in range(8)]
    dataflow = BatchData(DataFromList(points, shuffle=False), 4)
    quadratic = LineRegression(dim=4, init=1.0, target=1.0, lr=0.1, lr_variable=False)   # (x w - 1)^2
    launch_train_with_config(TrainConfig(model=quadratic, dataflow=dataflow, callbacks=[weights],
                                         monitors=[], max_epoch=3), XLATrainer())
    expected = 1.0
    for _ in range(6):  # d/dw_i of (0.5 * sum(w) - 1)^2 is (2 w_i - 1) when all w_i are equal
        expected -= 0.1 * (2 * expected - 1)
    np.testing.assert_allclose(weights.value.ravel(), [expected] * 4, rtol=1e-6)


def test_predictors_made_before_the_session_work_from_other_threads(digits):
    """tensorpack's FasterRCNN evaluation calls predictors of trainer.get_predictor() from a
    thread pool, in no session's default context: they run in trainer.sess."""
    from concurrent.futures import ThreadPoolExecutor
    images, labels = digits

    class EvalInThreads(Callback):
        def _setup_graph(self):
            self.predictors = [self.trainer.get_predictor(['image'], ['logits'], device=k) for k in (0, 1)]

        def _trigger_epoch(self):
            tower = self.trainer.towers.training()[0]
            self.expected = self.trainer.sess.run(tower['logits'], {tower['image']: images[:10]})
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = [pool.submit(pred, images[:10]) for pred in self.predictors]
                self.got = [fut.result()[0] for fut in futures]

    evaluate = EvalInThreads()
    trainer = SimpleTrainer()
    config = TrainConfig(model=DigitsMLP(), dataflow=batches_dataflow(images[:64], labels[:64]),
                         callbacks=[evaluate], monitors=[], max_epoch=1)
    launch_train_with_config(config, trainer)
    assert [pred.sess for pred in evaluate.predictors] == [trainer.sess, trainer.sess]
    for got in evaluate.got:
        np.testing.assert_allclose(got, evaluate.expected, rtol=0, atol=1e-6)
