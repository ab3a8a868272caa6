"""Debugging callbacks (DumpTensors, DumpTensorAsImage, DumpParamAsImage, InjectShell,
SendStat), model export (frozen GraphDef, SavedModel loaded in a fresh process) and the
dataset predictors (in this process and in worker processes)."""

import logging
import os
import shlex
import subprocess
import sys
import textwrap

import numpy as np
import psutil
import pytest

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.debug import DumpParamAsImage, DumpTensorAsImage, DumpTensors
from tensorpack_lite.callbacks.monitor import MonitorBase
from tensorpack_lite.callbacks.stats import InjectShell, SendStat
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.input_source import FeedInput
from tensorpack_lite.predict import OfflinePredictor, PredictConfig
from tensorpack_lite.predict.dataset import MultiProcessDatasetPredictor, SimpleDatasetPredictor
from tensorpack_lite.tfutils.export import ModelExporter
from tensorpack_lite.tfutils.sesscreate import NewSessionCreator
from tensorpack_lite.tfutils.sessinit import JustCurrentSession
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.train.base import Trainer

from helpers.callbacks import AssignValues, RecordCost
from helpers.dataflows import labelled_batches
from helpers.models import DigitsMLPBase
from helpers.processes import subprocess_env

BATCH = 16


# ----- a small model on the digits data (the pattern of train/test_interface.py) ---------------

@pytest.fixture(scope='module')
def digits(digits):
    """The first 256 digits of conftest's fixture."""
    images, labels = digits
    return images[:256], labels[:256]


def known_values(seed=0):
    """Variable values unlike the initializers, so that a test sees whether they were applied."""
    rng = np.random.RandomState(seed)
    shapes = {'fc0/W': (64, 32), 'fc0/b': (32,), 'fc1/W': (32, 10), 'fc1/b': (10,)}
    return {k: (rng.randn(*s) * 0.3).astype('float32') for k, s in shapes.items()}


def predict_config(values, outputs=('logits',)):
    return PredictConfig(model=DigitsMLPBase(), input_names=['image'], output_names=list(outputs),
                         session_init=AssignValues(values))


def reference_outputs(values, images, outputs=('logits',)):
    with tfv1.Graph().as_default():
        predictor = OfflinePredictor(predict_config(values, outputs))
        try:
            return predictor(images)
        finally:
            predictor.sess.close()


def image_batches(images, batch=BATCH):
    return BatchData(DataFromList([[x] for x in images], shuffle=False), batch)


class ReadAfterEpoch(Callback):
    """Reads variables with a session run of its own after every epoch."""

    def __init__(self, name):
        self.name, self.values = name, {}

    def _setup_graph(self):
        self.var, = [v for v in tfv1.global_variables() if v.op.name == self.name]

    def _trigger(self):
        self.values[self.global_step] = self.trainer.sess.run(self.var)


class ImageRecorder(MonitorBase):
    def __init__(self):
        self.images = []

    def process_image(self, name, value):
        self.images.append((self.epoch_num, name, value))


def child_processes():
    """Live children of this process, except multiprocessing's resource tracker (it lives as
    long as this process)."""
    alive = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() == psutil.STATUS_ZOMBIE or 'resource_tracker' in ' '.join(p.cmdline()):
                continue
        except psutil.NoSuchProcess:
            continue
        alive.append(p)
    return alive


def run_trainer(train_op, callbacks, steps_per_epoch=2, max_epoch=2, monitors=()):
    trainer = Trainer()
    trainer.train_op = train_op
    trainer.train(list(callbacks), list(monitors), NewSessionCreator(), JustCurrentSession(),
                  steps_per_epoch=steps_per_epoch, max_epoch=max_epoch)
    return trainer


def decode_pngs(paths):
    with tfv1.Graph().as_default():
        data = tfv1.placeholder(tf.string, [])
        decoded = tf.io.decode_png(data)
        with tfv1.Session() as sess:
            return [sess.run(decoded, {data: open(p, 'rb').read()}) for p in paths]


# ----- DumpTensors ------------------------------------------------------------------------

def test_dump_tensors_writes_the_values_of_each_epoch(digits, logdir):
    images, labels = digits
    steps, epochs = 3, 2
    costs, bias = RecordCost(), ReadAfterEpoch('fc0/b')
    dump = DumpTensors(['cost', 'fc0/b'])
    # FeedInput: 'cost' needs the fed batch, so it can only come along with the training step
    df = labelled_batches(images, labels, BATCH)
    config = TrainConfig(model=DigitsMLPBase(), data=FeedInput(df), callbacks=[costs, dump, bias],
                         monitors=[], steps_per_epoch=steps, max_epoch=epochs)
    launch_train_with_config(config, SimpleTrainer())

    files = sorted(f for f in os.listdir(logdir) if f.startswith('DumpTensor'))
    assert files == ['DumpTensor-3.npz', 'DumpTensor-6.npz']  # no temporary file left behind
    assert dump.last_dump == os.path.join(logdir, 'DumpTensor-6.npz')
    for epoch in range(1, epochs + 1):
        step = epoch * steps
        dumped = dict(np.load(os.path.join(logdir, 'DumpTensor-{}.npz'.format(step))))
        assert sorted(dumped) == ['cost', 'fc0/b']
        assert dumped['cost'].shape == () and float(dumped['cost']) == costs.costs[step - 1]
        np.testing.assert_array_equal(dumped['fc0/b'], bias.values[step])
    assert not np.array_equal(bias.values[3], bias.values[6])  # the variable did change


def test_dump_tensors_triggered_within_an_epoch_runs_tensors_separately(logdir, log_records):
    from tensorpack_lite.callbacks.trigger import PeriodicTrigger
    iterator = tfv1.data.make_one_shot_iterator(tf.data.Dataset.range(100))
    element = tf.identity(iterator.get_next(), name='element')
    # each step consumes one element; a separate run of 'element' consumes another one
    run_trainer(tf.group(element), [PeriodicTrigger(DumpTensors(['element']), every_k_steps=1)],
                steps_per_epoch=3, max_epoch=1)
    dumped = [int(np.load(os.path.join(logdir, 'DumpTensor-{}.npz'.format(s)))['element']) for s in (1, 2, 3)]
    assert dumped == [1, 3, 4]   # steps 1, 2: separate runs; step 3 (last of the epoch): the step's own
    warnings = [m for m in log_records.messages_at(logging.WARNING) if 'separate session run' in m]
    assert len(warnings) == 1 and "['element']" in warnings[0]


def test_dump_tensors_argument_and_setup_errors(logdir):
    with pytest.raises(TypeError, match='list of tensor names'):
        DumpTensors('cost')
    with pytest.raises(ValueError, match='duplicate'):
        DumpTensors(['a', 'a'])
    tfv1.get_variable('v', shape=[2])
    trainer = Trainer()
    with pytest.raises(KeyError, match="'nothing' is not in the graph"):
        DumpTensors(['nothing']).setup_graph(trainer)
    from tensorpack_lite.utils import logger
    logger.unset_logger_dir()
    with pytest.raises(RuntimeError, match='logger directory, which is not set'):
        DumpTensors(['v']).setup_graph(trainer)


# ----- images -----------------------------------------------------------------------------

def test_dump_tensor_and_param_as_images(logdir):
    rng = np.random.RandomState(1)
    batches = rng.uniform(-0.2, 1.2, size=(6, 2, 4, 5, 3)).astype('float32')  # one batch per step
    next_batch = tfv1.data.make_one_shot_iterator(tf.data.Dataset.from_tensor_slices(batches)).get_next()
    generated = tf.identity(next_batch, name='gen/images')
    initial = rng.uniform(0, 0.2, (4, 5)).astype('float32')
    weights = tfv1.get_variable('filters', initializer=initial)
    train_op = tf.group(generated, weights.assign_add(tf.fill([4, 5], 0.01)))
    recorder = ImageRecorder()
    dump_tensor = DumpTensorAsImage('gen/images')
    dump_param = DumpParamAsImage('filters', prefix='w', scale=1000)
    run_trainer(train_op, [dump_tensor, dump_param], steps_per_epoch=2, max_epoch=2, monitors=[recorder])

    files = sorted(os.listdir(logdir))
    assert [f for f in files if f.endswith('.png')] == [
        'gen_images-ep001-0.png', 'gen_images-ep001-1.png', 'gen_images-ep002-0.png',
        'gen_images-ep002-1.png', 'w-ep001.png', 'w-ep002.png']
    for epoch in (1, 2):
        # the batch of the epoch's last step (a separate run would have taken the next one)
        expected = np.clip(np.rint(batches[2 * epoch - 1].astype(np.float64) * 255), 0, 255).astype('uint8')
        paths = [os.path.join(logdir, 'gen_images-ep{:03d}-{}.png'.format(epoch, i)) for i in range(2)]
        decoded = decode_pngs(paths)
        assert decoded[0].shape == (4, 5, 3)
        np.testing.assert_array_equal(np.stack(decoded), expected)
    for epoch in (1, 2):
        # the variable after the epoch's 2 updates of +0.01 (one update = 10 levels at scale 1000)
        decoded, = decode_pngs([os.path.join(logdir, 'w-ep00{}.png'.format(epoch))])
        assert decoded.shape == (4, 5, 1)
        expected = (initial.astype(np.float64) + 0.02 * epoch) * 1000
        assert np.abs(decoded[:, :, 0] - expected).max() <= 1
    tags = [(e, n, v.shape) for e, n, v in recorder.images]
    assert tags == [(1, 'gen_images', (2, 4, 5, 3)), (1, 'w', (1, 4, 5, 1)),
                    (2, 'gen_images', (2, 4, 5, 3)), (2, 'w', (1, 4, 5, 1))]
    assert recorder.images[2][2].dtype == np.uint8


def test_param_image_out_of_range_is_an_error_unless_clipped(logdir):
    tfv1.get_variable('w', initializer=np.full((3, 3), 2.0, 'float32'))
    counter = tfv1.get_variable('counter', initializer=0)
    with pytest.raises(ValueError, match=r"DumpParamAsImage\(w\).*\[510, 510\].*clip=True"):
        run_trainer(counter.assign_add(1).op, [DumpParamAsImage('w')], max_epoch=1)
    with tfv1.Graph().as_default():
        tfv1.get_variable('w', initializer=np.full((3, 3), 2.0, 'float32'))
        counter = tfv1.get_variable('counter', initializer=0)
        tf.identity(counter, name='not_a_variable')
        dump = DumpParamAsImage('w', clip=True)
        run_trainer(counter.assign_add(1).op, [dump], max_epoch=1)
        decoded, = decode_pngs(dump.last_files)
        assert np.all(decoded == 255)
        with pytest.raises(TypeError, match="'not_a_variable' is not a variable"):
            DumpParamAsImage('not_a_variable').setup_graph(Trainer())
    with pytest.raises(ValueError, match='cannot write an image of shape'):
        from tensorpack_lite.callbacks.debug import _split_images
        _split_images(np.zeros((2, 3, 4, 5, 6)), 'x')


def test_param_image_takes_tensorpacks_tensor_name_keyword(logdir):
    tfv1.get_variable('conv/W', initializer=np.full((2, 3), 0.5, 'float32'))
    counter = tfv1.get_variable('counter', initializer=0)
    dump = DumpParamAsImage(tensor_name='conv/W:0', scale=100)
    run_trainer(counter.assign_add(1).op, [dump], max_epoch=1)
    assert dump.last_files == [os.path.join(logdir, 'conv_W-ep001.png')]
    decoded, = decode_pngs(dump.last_files)
    assert decoded.shape == (2, 3, 1) and np.all(decoded == 50)


# ----- InjectShell ------------------------------------------------------------------------

class FakeStdin:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.fixture
def shells(monkeypatch):
    """Replaces every shell InjectShell may open by a recorder."""
    import code
    import pdb
    calls = []
    try:
        import IPython
    except ImportError:
        pass
    else:
        monkeypatch.setattr(IPython, 'embed', lambda **kw: calls.append(('ipython', kw)))
    monkeypatch.setattr(pdb, 'set_trace', lambda *a, **kw: calls.append(('pdb', None)))
    monkeypatch.setattr(code, 'interact', lambda *a, **kw: calls.append(('code', kw)))
    return calls


def _counter_op():
    return tfv1.get_variable('counter', initializer=0).assign_add(1).op


def test_inject_shell_without_a_terminal_only_warns(tmp_path, monkeypatch, shells, log_records):
    flag = tmp_path / 'PAUSE.tmp'
    flag.write_text('')
    monkeypatch.setattr(sys, 'stdin', FakeStdin(False))
    trainer = run_trainer(_counter_op(), [InjectShell(str(flag))], steps_per_epoch=1, max_epoch=2)
    assert trainer.global_step == 2
    assert shells == []
    warnings = [m for m in log_records.messages_at(logging.WARNING) if str(flag) in m]
    assert len(warnings) == 2 and 'not a terminal' in warnings[0]
    assert not flag.exists()  # removed when training ended


def test_inject_shell_opens_the_shell_on_a_terminal(tmp_path, monkeypatch, shells):
    flag = tmp_path / 'PAUSE.tmp'
    monkeypatch.setattr(sys, 'stdin', FakeStdin(True))

    class CreateFlag(Callback):   # the file appears during epoch 2
        def _trigger_step(self):
            if self.epoch_num == 2:
                flag.write_text('')

    run_trainer(_counter_op(), [CreateFlag(), InjectShell(str(flag), shell='pdb')],
                steps_per_epoch=1, max_epoch=3)
    assert shells == [('pdb', None), ('pdb', None)]   # epochs 2 and 3
    with tfv1.Graph().as_default():
        shells.clear()
        flag.write_text('')
        trainer = run_trainer(_counter_op(), [InjectShell(str(flag))], steps_per_epoch=1, max_epoch=1)
        try:
            import IPython  # noqa: F401
            expected, namespace = 'ipython', 'user_ns'
        except ImportError:
            expected, namespace = 'code', 'local'   # the fallback shell
        assert [kind for kind, _ in shells] == [expected]
        assert shells[0][1][namespace]['trainer'] is trainer
    with pytest.raises(ValueError, match="'ipython' or 'pdb'"):
        InjectShell(shell='bash')


# ----- SendStat ---------------------------------------------------------------------------

class PutAccuracy(Callback):
    def _trigger(self):
        self.trainer.monitors.put_scalar('val-acc', 0.25 * self.epoch_num)


def test_send_stat_runs_the_command(tmp_path, log_records):
    out = tmp_path / 'sent.txt'
    ok = SendStat("printf '%s\\n' {val-acc:.3f} >> " + shlex.quote(str(out)), 'val-acc')
    failing = SendStat('exit 3 # {val-acc}', ['val-acc'])
    trainer = run_trainer(_counter_op(), [PutAccuracy(), ok, failing], steps_per_epoch=1, max_epoch=2)
    assert out.read_text().splitlines() == ['0.250', '0.500']
    assert ok.last_returncode == 0 and failing.last_returncode == 3
    errors = log_records.messages_at(logging.ERROR)
    assert errors == ["SendStat: command 'exit 3 # 0.25' failed with return code 3.",
                      "SendStat: command 'exit 3 # 0.5' failed with return code 3."]
    assert trainer.global_step == 2   # a failing command does not stop training


def test_send_stat_errors():
    with pytest.raises(ValueError, match=r"uses \['loss'\] which are not in names"):
        SendStat('echo {loss}', ['acc'])
    with pytest.raises(TypeError, match='names'):
        SendStat('echo', [])
    with pytest.raises(KeyError, match="statistic 'val-acc' was never put"):
        run_trainer(_counter_op(), [SendStat('true {val-acc}', 'val-acc')], steps_per_epoch=1, max_epoch=1)


# ----- ModelExporter ----------------------------------------------------------------------

def test_export_compact_matches_offline_predictor(tmp_path, digits):
    images = digits[0][:40]
    values = known_values()
    expected_logits, expected_prob = reference_outputs(values, images, ('logits', 'prob'))
    for optimize in (True, False):
        path = str(tmp_path / 'frozen-{}.pb'.format(optimize))
        ModelExporter(predict_config(values, ('logits', 'prob'))).export_compact(path, optimize=optimize)
        graph_def = tfv1.GraphDef.FromString(open(path, 'rb').read())
        ops = {n.op for n in graph_def.node}
        assert not ops & {'VarHandleOp', 'VariableV2', 'ReadVariableOp'}   # frozen
        assert 'label' not in {n.name for n in graph_def.node}              # pruned
        with tfv1.Graph().as_default() as graph:
            tfv1.import_graph_def(graph_def, name='')
            with tfv1.Session(graph=graph) as sess:
                logits, prob = sess.run(['logits:0', 'prob:0'], {'image:0': images})
        np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=1e-5)
        np.testing.assert_allclose(prob, expected_prob, rtol=0, atol=1e-6)
    assert sorted(os.listdir(tmp_path)) == ['frozen-False.pb', 'frozen-True.pb']


# A TF2 client in eager mode, without tensorpack_lite: writes what each way of calling the
# signatures returns, by output key.
CALL_SAVED_MODEL_EAGERLY = textwrap.dedent("""
    import os
    import sys
    import numpy as np
    import tensorflow as tf
    path, images_file, out_file = sys.argv[1:]
    images = tf.constant(np.load(images_file))
    signatures = tf.saved_model.load(path).signatures
    results = {
        'tensor_keys': signatures['prediction_pipeline'](**{'image:0': images}),
        'sanitized_keyword': signatures['prediction_pipeline'](image_0=images),
        'keywords': signatures['serving_default'](image=images),
    }
    np.savez(out_file, **{'{} {}'.format(call, key): value.numpy()
                          for call, outputs in results.items() for key, value in outputs.items()})
    os._exit(0)   # skip the slow TensorFlow teardown
""")


def run_like_a_tf1_serving_client(path, signature_name, feeds):
    """``{output key: value}`` of the signature, run through its tensor info in graph mode."""
    with tfv1.Graph().as_default(), tfv1.Session() as sess:
        meta = tfv1.saved_model.loader.load(sess, [tfv1.saved_model.SERVING], path)
        signature = meta.signature_def[signature_name]
        assert sorted(signature.inputs) == sorted(feeds)
        keys = sorted(signature.outputs)
        values = sess.run([signature.outputs[k].name for k in keys],
                          {signature.inputs[k].name: value for k, value in feeds.items()})
        return dict(zip(keys, values))


def test_export_serving_has_tensorpacks_signature_and_keys_and_a_keyword_signature(
        tmp_path, digits):
    images = digits[0][:40]
    values = known_values(seed=5)
    expected_logits, expected_prob = reference_outputs(values, images, ('logits', 'prob'))
    export_dir = str(tmp_path / 'exported')
    ModelExporter(predict_config(values, ('logits', 'prob'))).export_serving(export_dir)
    assert sorted(os.listdir(export_dir)) == ['saved_model.pb', 'variables']

    # a client of a tensorpack export: tensorpack's signature name and keys
    tensorpack_keys = run_like_a_tf1_serving_client(export_dir, 'prediction_pipeline', {'image:0': images})
    plain_keys = run_like_a_tf1_serving_client(export_dir, 'serving_default', {'image': images})
    assert sorted(tensorpack_keys) == ['logits:0', 'prob:0'] and sorted(plain_keys) == ['logits', 'prob']
    for outputs, suffix in ((tensorpack_keys, ':0'), (plain_keys, '')):
        logits, prob = 'logits' + suffix, 'prob' + suffix
        np.testing.assert_allclose(outputs[logits], expected_logits, rtol=0, atol=1e-5)
        np.testing.assert_allclose(outputs[prob], expected_prob, rtol=0, atol=1e-6)

    np.save(str(tmp_path / 'images.npy'), images)
    env = subprocess_env(PYTHONPATH=None)   # no tensorpack_lite there
    out = str(tmp_path / 'out.npz')
    proc = subprocess.run([sys.executable, '-c', CALL_SAVED_MODEL_EAGERLY, export_dir,
                           str(tmp_path / 'images.npy'), out],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    eager = dict(np.load(out))
    assert sorted(eager) == ['keywords logits', 'keywords prob', 'sanitized_keyword logits:0',
                             'sanitized_keyword prob:0', 'tensor_keys logits:0', 'tensor_keys prob:0']
    for key, value in eager.items():
        expected = expected_prob if key.split(' ')[1].startswith('prob') else expected_logits
        np.testing.assert_allclose(value, expected, rtol=0, atol=1e-5, err_msg=key)
    assert not np.allclose(expected_logits, reference_outputs({}, images)[0], atol=1e-3)  # values applied

    with pytest.raises(FileExistsError, match='exists'):
        ModelExporter(predict_config(values)).export_serving(export_dir)


def signature_keys(export_dir):
    """{signature name: input keys} of a SavedModel."""
    with tfv1.Graph().as_default(), tfv1.Session() as sess:
        meta = tfv1.saved_model.loader.load(sess, [tfv1.saved_model.SERVING], export_dir)
    return {name: sorted(signature.inputs) for name, signature in meta.signature_def.items()}


def test_export_serving_signature_names(tmp_path):
    exporter = ModelExporter(predict_config(known_values()))
    exporter.export_serving(str(tmp_path / 'renamed'), signature_name='predict',
                            keyword_signature_name='plain')
    assert signature_keys(str(tmp_path / 'renamed')) == {'predict': ['image:0'], 'plain': ['image']}
    exporter.export_serving(str(tmp_path / 'one'), keyword_signature_name=None)
    assert signature_keys(str(tmp_path / 'one')) == {'prediction_pipeline': ['image:0']}
    with pytest.raises(ValueError, match="both 'serving_default'; the two signatures need two keys"):
        exporter.export_serving(str(tmp_path / 'clash'), signature_name='serving_default')
    assert sorted(os.listdir(str(tmp_path))) == ['one', 'renamed']


def test_exporter_errors(tmp_path):
    with pytest.raises(TypeError, match='PredictConfig'):
        ModelExporter(object())
    with pytest.raises(ValueError, match="output_names.*'nope:0' is not in tower"):
        ModelExporter(predict_config({}, ['nope'])).export_compact(str(tmp_path / 'x.pb'))
    assert os.listdir(tmp_path) == []
    with pytest.raises(ValueError, match='duplicate'):
        ModelExporter(predict_config({}, ['logits', 'logits']))
    with pytest.raises(ValueError, match=r"duplicate names \['logits:0'\]"):
        ModelExporter(predict_config({}, ['logits', 'logits:0']))


# ----- dataset predictors -----------------------------------------------------------------

def test_simple_dataset_predictor_matches_offline_predictor(digits):
    images = digits[0][:100]
    values = known_values(seed=2)
    predictor = SimpleDatasetPredictor(predict_config(values), image_batches(images))
    results = predictor.get_all_result()
    assert len(results) == 100 // BATCH
    reference = OfflinePredictor(predict_config(values))
    for i, outputs in enumerate(results):
        assert len(outputs) == 1 and outputs[0].shape == (BATCH, 10)
        np.testing.assert_allclose(outputs[0], reference(images[i * BATCH:(i + 1) * BATCH])[0],
                                   rtol=0, atol=1e-6)
    assert len(predictor.get_all_result()) == len(results)   # it can run again
    with pytest.raises(TypeError, match='DataFlow'):
        SimpleDatasetPredictor(predict_config(values), [images])


def test_multiprocess_predictor_in_order_and_leaves_no_process(digits):
    images = digits[0][:160]
    values = known_values(seed=4)
    before = {p.pid for p in child_processes()}
    predictor = MultiProcessDatasetPredictor(predict_config(values), image_batches(images), nr_proc=2)
    generator = predictor.get_result()
    results = [next(generator)]
    workers = {w.pid for w in predictor._workers}
    assert len(workers) == 2 and workers <= {p.pid for p in child_processes()}
    results += list(generator)
    expected, = reference_outputs(values, images)
    assert len(results) == len(images) // BATCH
    for i, outputs in enumerate(results):
        np.testing.assert_allclose(outputs[0], expected[i * BATCH:(i + 1) * BATCH], rtol=0, atol=1e-5)
    assert {p.pid for p in child_processes()} - before == set()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in workers)
    assert predictor._workers == []


def test_multiprocess_predictor_worker_error_stops_everything(digits):
    images = digits[0][:64]
    points = [[images[i * BATCH:(i + 1) * BATCH]] for i in range(4)]
    points[2] = [images[:BATCH, :60]]   # a datapoint of the wrong shape
    before = {p.pid for p in child_processes()}   # e.g. a server another module's fixture keeps
    predictor = MultiProcessDatasetPredictor(predict_config(known_values()),
                                             DataFromList(points, shuffle=False), nr_proc=1, use_gpu=False)
    results = predictor.get_result()
    first = [next(results), next(results)]
    expected, = reference_outputs(known_values(), images[:2 * BATCH])
    np.testing.assert_allclose(np.concatenate([f[0] for f in first]), expected, rtol=0, atol=1e-5)
    with pytest.raises(RuntimeError, match=r'prediction failed on datapoint 2:(.|\n)*image'):
        next(results)
    assert {p.pid for p in child_processes()} - before == set()


def test_multiprocess_predictor_argument_errors(digits, monkeypatch):
    df = image_batches(digits[0][:32])
    unpicklable = PredictConfig(tower_func=lambda x: tf.identity(x, name='y'),
                                input_signature=[tf.TensorSpec([None], tf.float32, 'x')],
                                output_names=['y'])
    with pytest.raises(TypeError, match='cannot be pickled'):
        MultiProcessDatasetPredictor(unpicklable, df, nr_proc=1)
    with pytest.raises(ValueError, match='nr_proc'):
        MultiProcessDatasetPredictor(predict_config({}), df, nr_proc=0)
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0')
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES='0' has 1"):
        MultiProcessDatasetPredictor(predict_config({}), df, nr_proc=2)
    monkeypatch.setenv('CUDA_VISIBLE_DEVICES', '0,-1,1')      # CUDA stops at -1: one GPU
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES='0,-1,1' has 1"):
        MultiProcessDatasetPredictor(predict_config({}), df, nr_proc=2)
    assert MultiProcessDatasetPredictor(predict_config({}), df, nr_proc=1)._gpus == ['0']
    on_cpu = MultiProcessDatasetPredictor(predict_config({}), df, nr_proc=2, use_gpu=False)
    assert on_cpu._gpus == ['-1', '-1']
