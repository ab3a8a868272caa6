"""HorovodTrainer on the MPI engine (graph_builder/mpi_ops.py, mpi4py + MPICH): the facade in
this process (size 1), then 2 and 3 real ranks under the wheel's ``mpiexec`` on
tests/horovod_scripts/train_tiny.py, against one process trained on the combined batches."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from helpers.processes import run_bounded, subprocess_env
from helpers.mpi import (BATCH, EPOCHS, LR, MPIEXEC, RUN_TIMEOUT, SCRIPT, STEPS, SUPERVISED,
                         assert_bit_identical, assert_close, load_rank, needs_mpiexec, pid_of_rank, rank_env,
                         rank_logs, reference_weights, run_ranks, starts_mpi_here, train_tiny)
from tensorpack_lite.compat import tf, tfv1

mpi4py = pytest.importorskip('mpi4py',
                             reason='the MPI engine needs mpi4py: pip install "tensorpack_lite[mpi]"')

from tensorpack_lite.graph_builder import mpi_ops  # noqa: E402
from tensorpack_lite.train.horovod_trainer import HorovodTrainer  # noqa: E402


# ----- the facade in this process (size 1) -------------------------------------------------------

@pytest.fixture
def hvd():
    mpi_ops.init()
    yield mpi_ops
    mpi_ops.shutdown()


@pytest.mark.quick
@starts_mpi_here
def test_facade_with_one_rank(hvd):
    assert hvd.is_initialized()
    assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
    x = tf.constant([[1.5, -2.0], [3.0, 0.25]])
    v = tfv1.get_variable('v', initializer=[2.0, 3.0])
    with hvd.ordered_collectives():
        total = hvd.allreduce(x * v, op=hvd.Sum)
        mean16 = hvd.allreduce(x * v, op=hvd.Average, compression=hvd.Compression.fp16)
        grad = tf.gradients(tf.reduce_sum(total * total), [v])[0]
    calls = [op for op in tfv1.get_default_graph().get_operations() if op.type == 'PyFunc']
    assert len(calls) == 3   # total, mean16, the gradient: each waits for the one created before
    assert calls[1].control_inputs == [calls[0]] and calls[2].control_inputs == [calls[1]]
    ints = hvd.allreduce(tf.constant([1, 2], tf.int64), op=hvd.Sum)
    gathered = hvd.allgather(tf.constant([[1, 2, 3]]))
    broadcast = hvd.broadcast(tf.constant([7.0]), root_rank=0)
    assign = hvd.broadcast_variables([v], root_rank=0)
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        t, m, g, i, a, b = sess.run([total, mean16, grad, ints, gathered, broadcast])
        sess.run(assign)
        np.testing.assert_array_equal(sess.run(v), [2.0, 3.0])
    np.testing.assert_array_equal(t, [[3.0, -6.0], [6.0, 0.75]])
    np.testing.assert_array_equal(m, t)   # all exactly representable in float16
    # the engine's counters: total, mean16 (float16 on the wire), grad and ints; gathered; broadcast
    # and assign: (collectives, bytes this rank put in)
    assert hvd.traffic() == {'allreduce': (4, 16 + 8 + 16 + 16), 'allgather': (1, 12),
                             'broadcast': (2, 4 + 8)}
    assert hvd.traffic()['allreduce'] - (1, 16) == (3, 40)
    np.testing.assert_allclose(g, [2 * (3.0 * 1.5 + 6.0 * 3.0), 2 * (-6.0 * -2.0 + 0.75 * 0.25)])
    assert i.tolist() == [1, 2] and a.tolist() == [[1, 2, 3]] and b.tolist() == [7.0]


def test_compressors_as_horovods():
    x = tf.constant([1.0, 2.5])
    sent, ctx = mpi_ops.Compression.fp16.compress(x)
    assert sent.dtype == tf.float16 and mpi_ops.Compression.fp16.decompress(sent, ctx).dtype == tf.float32
    same, ctx = mpi_ops.Compression.none.compress(x)
    assert same is x and mpi_ops.Compression.none.decompress(same, ctx) is x
    ints, ctx = mpi_ops.Compression.fp16.compress(tf.constant([1, 2]))
    assert ints.dtype == tf.int32 and ctx is None


@starts_mpi_here
def test_facade_rejects_bad_arguments(hvd):
    with pytest.raises(ValueError, match='op must be mpi_ops.Average or mpi_ops.Sum'):
        hvd.allreduce(tf.constant(1.0), op='Max')
    with pytest.raises(TypeError, match='compression must be'):
        hvd.allreduce(tf.constant(1.0), compression='fp16')
    with pytest.raises(ValueError, match=r'root_rank must be in \[0, 1\), got 1'):
        hvd.broadcast(tf.constant(1.0), root_rank=1)
    average_of_ints = hvd.allreduce(tf.constant([1, 2]), op=hvd.Average)
    with tfv1.Session() as sess, pytest.raises(tf.errors.OpError, match='op=Average needs floating-point'):
        sess.run(average_of_ints)


@starts_mpi_here
def test_facade_after_shutdown(hvd):
    hvd.shutdown()
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match='call init'):
        hvd.rank()


@starts_mpi_here
def test_trainer_uses_mpi_without_horovod(monkeypatch, log_records):
    monkeypatch.setitem(sys.modules, 'horovod', None)
    monkeypatch.setitem(sys.modules, 'horovod.tensorflow', None)
    trainer = HorovodTrainer(compression=mpi_ops.Compression.fp16)
    try:
        assert trainer.hvd is mpi_ops and trainer.hvd.rank() == 0 and trainer.size == 1
        assert 'using MPI (mpi4py {}, MPICH'.format(mpi4py.__version__) in '\n'.join(log_records.messages())
        with pytest.raises(TypeError, match='compression must be a compressor of its engine'):
            HorovodTrainer(compression=object)
    finally:
        mpi_ops.shutdown()


@starts_mpi_here
def test_trainer_gives_layers_the_mean_over_ranks(monkeypatch):
    """While HorovodTrainer builds its tower, cross_rank_mean (BatchNorm's sync_statistics=
    'horovod') is the engine's differentiable allreduce."""
    from tensorpack_lite.dataflow import BatchData, DataFromList
    from tensorpack_lite.multiprocess.sync_statistics import cross_rank_mean
    from tensorpack_lite.train import ModelDesc, TrainConfig, launch_train_with_config
    monkeypatch.setitem(sys.modules, 'horovod', None)
    monkeypatch.setitem(sys.modules, 'horovod.tensorflow', None)
    seen = []

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None, 2], tf.float32, 'x')]

        def build_graph(self, x):
            w = tfv1.get_variable('w', initializer=[1.0, 2.0])
            mean = cross_rank_mean(tf.reduce_mean(x * w, axis=0))
            seen.append(mean)
            return tf.reduce_sum(mean * mean, name='cost')

        def optimizer(self):
            return tfv1.train.GradientDescentOptimizer(0.1)

    trainer = HorovodTrainer()
    df = BatchData(DataFromList([[np.array([1.0, 1.0], np.float32)]] * 2, shuffle=False), 2)
    launch_train_with_config(TrainConfig(model=Model(), dataflow=df, steps_per_epoch=1, max_epoch=1,
                                         callbacks=[], monitors=[]), trainer)
    calls = [op for op in seen[0].graph.get_operations() if op.type == 'PyFunc']
    # the mean, its gradient (chained to it); (one rank: no gradient allreduce); the check of the
    # variable names (two allgathers, chained), the broadcast of the variables and of rank 0's schedule
    assert [op.name for op in calls] == [
        'MPIAllreduce', 'gradients/IdentityN_grad/MPIAllreduce', 'HorovodTrainer/variable_names',
        'HorovodTrainer/variable_names_size', 'HorovodTrainer/MPIBroadcastVariables',
        'HorovodTrainer/schedule']
    assert calls[1].control_inputs == [calls[0]] and calls[3].control_inputs == [calls[2]]
    assert calls[2].control_inputs == [] and calls[4].control_inputs == [] and calls[5].control_inputs == []
    assert seen[0].op.type == 'IdentityN'   # the custom gradient's output
    assert not mpi_ops.is_initialized()   # shut down at the end


class _PredictAfterTraining(train_tiny.Callback):
    """Builds an inference tower (get_predictor) and, after training, runs it on ``samples``."""

    def __init__(self, samples):
        self.samples = samples

    def _setup_graph(self):
        self.predictor = self.trainer.get_predictor(['x', 'y'], ['cost'])

    def _after_train(self):
        x = np.stack([s[0] for s in self.samples])
        y = np.stack([s[1] for s in self.samples])
        self.cost = float(self.predictor(x, y)[0])
        variables = tfv1.global_variables() + tfv1.local_variables()
        self.weights = dict(zip([v.op.name for v in variables], self.trainer.sess.run(variables)))


def _inference_cost(weights, samples):
    """TinyModel's cost with its BatchNorm in inference mode, in numpy."""
    x = np.stack([s[0] for s in samples])
    y = np.stack([s[1] for s in samples])
    hidden = x @ weights['fc0/W'] + weights['fc0/b']
    hidden = (hidden - weights['bn/mean/EMA']) / np.sqrt(weights['bn/variance/EMA'] + 1e-5) \
        * weights['bn/gamma'] + weights['bn/beta']
    return float(np.mean(np.square((np.tanh(hidden) @ weights['fc1/W'])[:, 0] - y)))


@starts_mpi_here
def test_towers_inside_a_rank_are_placed_on_their_devices_and_train_like_one_process(monkeypatch):
    """HorovodTrainer(gpus=['/cpu:0', '/cpu:1']) on one rank: each tower's ops and replica on its
    device, the mean over ranks (BatchNorm's, here) crossed by tower 0 alone, one process's
    result on the combined batch, replicas equal to the main variables, a working predictor."""
    from tensorpack_lite.dataflow import BatchData, DataFromList
    from tensorpack_lite.train import TrainConfig, launch_train_with_config
    monkeypatch.setitem(sys.modules, 'horovod', None)
    monkeypatch.setitem(sys.modules, 'horovod.tensorflow', None)
    with pytest.raises(ValueError, match='towers 0 and 1 are both on device CPU:0'):
        HorovodTrainer(gpus=['/cpu:0', '/cpu:0'])
    trainer = HorovodTrainer(gpus=['/cpu:0', '/cpu:1'])
    samples = train_tiny.make_samples(STEPS * BATCH * 2)
    predict = _PredictAfterTraining(samples[:5])
    config = TrainConfig(model=train_tiny.TinyModel(train_tiny.INIT_SEED, LR, 'horovod'),
                         dataflow=BatchData(DataFromList(samples, shuffle=False), BATCH),
                         callbacks=[predict], monitors=[], steps_per_epoch=STEPS, max_epoch=EPOCHS,
                         session_config=tfv1.ConfigProto(device_count={'CPU': 2}))
    launch_train_with_config(config, trainer)
    assert [t.ns_name for t in trainer.towers.training()] == ['tower0', 'tower1']
    graph = tfv1.get_default_graph()
    for k in (0, 1):
        in_tower = [op for op in graph.get_operations() if op.name.startswith('tower{}/'.format(k))]
        # (reads and initializers of variables have no device: they are colocated with them)
        assert {op.device for op in in_tower} == {'', '/device:CPU:{}'.format(k)}
        assert {op.device for op in in_tower if op.type in ('MatMul', 'Tanh')} == {'/device:CPU:{}'.format(k)}
    replicas = {v.op.name: v for v in tfv1.local_variables() if v.op.name.startswith('tower1/')}
    assert {'tower1/fc0/W', 'tower1/fc1/W', 'tower1/fc0/W/Momentum'} <= set(replicas)
    assert replicas['tower1/fc0/W'].device == '/device:CPU:1'
    assert graph.get_operation_by_name('fc0/W').device == '/device:CPU:0'
    # the only collectives across ranks: tower 0's mean of the statistics and its gradient (one rank:
    # no allreduce of the gradients), the variable check, the broadcasts of the variables and schedule
    crossing = [op.name for op in graph.get_operations() if op.type == 'PyFunc']
    assert crossing == ['tower0/bn/towers_and_ranks_mean/MPIAllreduce',
                        'tower0/gradients/tower0/bn/towers_and_ranks_mean/IdentityN_grad/MPIAllreduce',
                        'HorovodTrainer/variable_names', 'HorovodTrainer/variable_names_size',
                        'HorovodTrainer/MPIBroadcastVariables', 'HorovodTrainer/schedule']
    with tfv1.Graph().as_default():
        reference = reference_weights(2, LR, batch_norm='')
    final = predict.weights
    assert_close({n: final[n] for n in reference}, reference, rtol=1e-4, atol=1e-5)
    for name in replicas:   # the same update on both replicas (and the same optimizer state)
        assert final[name].tobytes() == final[name[len('tower1/'):]].tobytes(), name
    assert predict.cost == pytest.approx(_inference_cost(final, samples[:5]), rel=1e-5)
    assert not mpi_ops.is_initialized()


@starts_mpi_here
def test_towers_inside_a_rank_need_their_devices_in_the_session(monkeypatch):
    from tensorpack_lite.dataflow import BatchData, DataFromList
    from tensorpack_lite.train import TrainConfig, launch_train_with_config
    monkeypatch.setitem(sys.modules, 'horovod', None)
    monkeypatch.setitem(sys.modules, 'horovod.tensorflow', None)
    trainer = HorovodTrainer(gpus=['/cpu:0', '/cpu:1'])
    config = TrainConfig(model=train_tiny.TinyModel(train_tiny.INIT_SEED, LR),
                         dataflow=BatchData(DataFromList(train_tiny.make_samples(8), shuffle=False), BATCH),
                         callbacks=[], monitors=[], max_epoch=1)
    try:
        with pytest.raises(ValueError, match="tower 1 is on device '/cpu:1', which this session does not"):
            launch_train_with_config(config, trainer)
    finally:
        if mpi_ops.is_initialized():
            mpi_ops.shutdown()


def test_without_any_engine_the_error_says_how_to_install(monkeypatch):
    for module in ('horovod', 'horovod.tensorflow', 'mpi4py', 'mpi4py.MPI'):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=re.escape('pip install "tensorpack_lite[mpi]"')) as info:
        HorovodTrainer()
    assert 'horovod==0.28.1' in str(info.value)


# ----- real ranks under mpiexec -------------------------------------------------------------------

@needs_mpiexec
@pytest.mark.parametrize('num', [3])   # 2 ranks: the two-rank tests below and above
def test_facade_across_ranks(num, tmp_path):
    """Sum, average, fp16, gradient, allgather, broadcast: values and the same bits on every rank
    (tests/horovod_scripts/mpi_facade.py asserts them on each rank)."""
    code, output = run_ranks(num, tmp_path, script=os.path.join(os.path.dirname(SCRIPT), 'mpi_facade.py'))
    assert code == 0, output[-6000:]
    assert sorted(re.findall(r'rank (\d+): OK', output)) == [str(r) for r in range(num)], output[-6000:]


@needs_mpiexec
@pytest.mark.parametrize('num', [3])   # 2 ranks: the two-rank tests below and above
def test_ranks_average_like_one_process_and_stay_bit_identical(num, tmp_path):
    # no broadcast at epoch ends: identical replicas come from identical sums alone
    code, output = run_ranks(num, tmp_path, '--no-epoch-broadcast')
    assert code == 0, output[-6000:]
    ranks = [load_rank(tmp_path, r) for r in range(num)]
    assert ranks[0]['engine'].startswith('MPI (mpi4py')
    assert [(r['local_rank'], r['local_size']) for r in ranks] == [(r, num) for r in range(num)]
    assert all(len(r['step_hashes']) == STEPS * EPOCHS for r in ranks)
    assert len(set(ranks[0]['step_hashes'])) == STEPS * EPOCHS   # the weights changed every step
    assert_bit_identical(ranks)
    assert_close(ranks[0]['weights'], reference_weights(num, LR), rtol=1e-4, atol=1e-5)
    # the gradients (168 bytes with the preemption vote) in groups of >= 1/4 of them, in the order
    # backprop makes them: the vote and the last layer's weight first, the first layer's bias last;
    # the second call runs after the first
    calls = ranks[0]['allreduce_calls']
    assert [c['shapes'] for c in calls] == [[[2], [5, 1], [6, 5]], [[5]]], calls
    assert calls[1]['after'] == [calls[0]['name']] and calls[0]['after'] == [], calls


@needs_mpiexec
def test_fp16_mixed_precision_ranks_stay_bit_identical(tmp_path):
    """mixed_precision='fp16' (float16 emulated on the CPU, loss scaling decided on the
    all-reduced gradients): the first scale (2**15) overflows this model's float16 gradients
    once; both ranks skip that step together and go on with the same weights."""
    code, output = run_ranks(2, tmp_path, '--no-epoch-broadcast', '--mixed-precision', 'fp16')
    assert code == 0, output[-6000:]
    ranks = [load_rank(tmp_path, r) for r in range(2)]
    assert len(ranks[0]['step_hashes']) == STEPS * EPOCHS
    assert len(set(ranks[0]['step_hashes'])) == STEPS * EPOCHS - 1   # one step skipped
    assert_bit_identical(ranks)
    for rank in ranks:
        assert all(np.all(np.isfinite(value)) for value in rank['weights'].values())


@needs_mpiexec
@pytest.mark.parametrize('num', [3])   # 2 ranks: the two-rank tests below and above
def test_synchronized_batch_norm_over_ranks_trains_like_one_process_on_the_big_batch(num, tmp_path):
    """BatchNorm(sync_statistics='horovod') under mpiexec: the weights and moving averages of
    every rank equal one process's BatchNorm on the batches of all ranks together."""
    code, output = run_ranks(num, tmp_path, '--sync-batch-norm', '--no-epoch-broadcast')
    assert code == 0, output[-6000:]
    ranks = [load_rank(tmp_path, r) for r in range(num)]
    assert {'bn/mean/EMA', 'bn/variance/EMA', 'bn/gamma', 'bn/beta'} <= set(ranks[0]['weights'])
    reference = reference_weights(num, LR, batch_norm='')
    for rank in ranks:
        assert_close(rank['weights'], reference, rtol=1e-4, atol=1e-5)
    # rank 0's share alone gives other moving averages: the statistics must cross the ranks
    with tfv1.Graph().as_default():
        alone = train_tiny.train_single(train_tiny.make_samples(STEPS * BATCH * num)[0::num], BATCH, LR,
                                        STEPS, EPOCHS, batch_norm='')
    assert not np.allclose(alone['bn/mean/EMA'], ranks[0]['weights']['bn/mean/EMA'], atol=1e-3)


def split_replicas(weights):
    """``(main variables, {replica name: main name})`` of the weights of a rank with towers."""
    replicas = {n: n.split('/', 1)[1] for n in weights if re.match(r'tower[1-9]\d*/', n)}
    return {n: v for n, v in weights.items() if n not in replicas}, replicas


@needs_mpiexec
@pytest.mark.parametrize('args, lr_factor, rtol, atol', [
    ((), 1, 1e-4, 1e-5),
    (('--sync-batch-norm',), 1, 1e-4, 1e-5),
    (('--sum', '--fp16'), 4, 1e-2, 1e-3)], ids=['average', 'sync-batch-norm', 'sum-fp16'])
def test_two_ranks_of_two_towers_train_like_one_process_on_the_combined_batch(args, lr_factor, rtol, atol,
                                                                              tmp_path):
    """HorovodTrainer(gpus=['/cpu:0', '/cpu:1']) on 2 ranks: the update of one process on the 4
    batches (the sum: 4 times the mean gradient), replicas and ranks bit-identical."""
    code, output = run_ranks(2, tmp_path, '--towers', '2', '--no-epoch-broadcast', *args)
    assert code == 0, output[-6000:]
    assert len(re.findall(r'rank \d of 2 \(local rank \d\), towers on /cpu:0, /cpu:1', output)) == 2
    ranks = [load_rank(tmp_path, r) for r in range(2)]
    assert all(len(r['step_hashes']) == STEPS * EPOCHS for r in ranks)
    assert len(set(ranks[0]['step_hashes'])) == STEPS * EPOCHS
    assert_bit_identical(ranks)
    main, replicas = split_replicas(ranks[0]['weights'])
    assert {'tower1/fc0/W', 'tower1/fc1/W'} <= set(replicas)
    for replica, name in replicas.items():
        assert ranks[0]['weights'][replica].tobytes() == main[name].tobytes(), replica
    batch_norm = '' if '--sync-batch-norm' in args else None
    reference = reference_weights(4, lr_factor * LR, batch_norm=batch_norm)
    assert_close(main, reference, rtol=rtol, atol=atol)
    if '--fp16' in args:
        assert any(not np.array_equal(main[n], reference[n]) for n in reference)   # rounded


ACCUMULATE, UPDATES = 4, 2     # micro-batches of BATCH per update; updates per epoch


def run_accumulating(out_dir, optimizer, *args, accumulate=ACCUMULATE, num=2):
    """``num`` ranks on train_tiny.py, ``accumulate`` micro-batches per update, one epoch of
    UPDATES updates; returns the ranks' results (and asserts they ended well, bit-identical)."""
    code, output = run_ranks(num, out_dir, '--accumulate', str(accumulate), '--optimizer', optimizer,
                             '--steps-per-epoch', str(accumulate * UPDATES), '--epochs', '1',
                             '--no-epoch-broadcast', *args)
    assert code == 0, output[-6000:]
    ranks = [load_rank(out_dir, r) for r in range(num)]
    assert [r['global_step'] for r in ranks] == [accumulate * UPDATES] * num
    assert_bit_identical(ranks)
    return ranks


@needs_mpiexec
@pytest.mark.parametrize('optimizer', ['sgd', 'momentum', 'adam'])
def test_two_ranks_accumulating_4_micro_batches_train_like_one_process_on_the_combined_batch(
        optimizer, tmp_path):
    """Issue 60: accumulate=4, 8 steps of 4 datapoints on each of 2 ranks: every 4th step
    all-reduces the mean of the ranks' accumulated gradients and applies it (the optimizer's
    state advances once per update), the 3 steps before reduce nothing; so the run is 2 updates
    of one process on 32 datapoints each."""
    ranks = run_accumulating(tmp_path, optimizer)
    # the weights change at the updates only (the 4th and the 8th step)
    hashes = ranks[0]['step_hashes']
    assert [k for k in range(1, len(hashes)) if hashes[k] != hashes[k - 1]] == [3, 7]
    assert [calls for calls, _ in ranks[0]['step_traffic']] == [0, 0, 0, 2] * UPDATES
    reference = train_tiny.accumulated_reference(2, ACCUMULATE, BATCH, ACCUMULATE * UPDATES, 1, LR, optimizer)
    assert_close(ranks[0]['weights'], reference, rtol=0, atol=1e-6)


@needs_mpiexec
def test_accumulating_ranks_all_reduce_once_per_update_what_one_step_does_without(tmp_path):
    """The engine's counters (mpi_ops.traffic()) on each rank: with accumulate=4, the update's
    step all-reduces the bytes (and in the calls) of a step without accumulation, the gradients
    and the preemption vote (4 * (30 + 5 + 5 + 2) = 168 bytes, in MPI_GROUPS' 2 calls), and the 3
    accumulating steps before it nothing."""
    plain = tmp_path / 'plain'
    plain.mkdir()
    once = run_accumulating(plain, 'sgd', accumulate=1)
    accumulated = run_accumulating(tmp_path, 'sgd')
    for rank in range(2):
        step = once[rank]['step_traffic']
        assert step == [[2, 168]] * UPDATES, step
        assert accumulated[rank]['step_traffic'] == ([[0, 0]] * (ACCUMULATE - 1) + step[:1]) * UPDATES
        assert accumulated[rank]['allreduce_calls'] == once[rank]['allreduce_calls']    # the same graph
    # (and they did different things: 2 updates of 32 datapoints, 2 of 8)
    assert once[0]['step_hashes'][-1] != accumulated[0]['step_hashes'][-1]


@needs_mpiexec
def test_accumulating_ranks_synchronize_batch_norm_per_micro_batch_like_one_process(tmp_path):
    """BatchNorm(sync_statistics='horovod') with accumulate=4: the statistics' reduction (in the
    tower, chained before the gradients' by ordered_collectives) runs in every step, the
    gradients' in the update's only; the result is one process's with accumulate=4 on micro-batches
    of both ranks' datapoints (BatchNorm over 8, moving averages per micro-batch)."""
    ranks = run_accumulating(tmp_path, 'momentum', '--sync-batch-norm')
    # the statistics and their gradient (2 x 5 floats each), then also the gradients and the vote
    assert ranks[0]['step_traffic'] == [[2, 80], [2, 80], [2, 80], [5, 80 + 4 * (40 + 10 + 2)]] * UPDATES
    with tfv1.Graph().as_default():
        samples = train_tiny.make_samples(ACCUMULATE * UPDATES * BATCH * 2)
        reference = train_tiny.train_single(samples, 2 * BATCH, LR, ACCUMULATE * UPDATES, 1, batch_norm='',
                                            accumulate=ACCUMULATE)
    assert {'bn/mean/EMA', 'bn/variance/EMA'} <= set(reference)
    assert_close(ranks[0]['weights'], reference, rtol=0, atol=1e-6)


@needs_mpiexec
def test_two_ranks_of_two_towers_accumulating_train_like_one_process_on_the_combined_batch(tmp_path):
    """HorovodTrainer(gpus=['/cpu:0', '/cpu:1']) on 2 ranks with accumulate=4: each tower keeps its
    own accumulators, the towers' sum crosses the ranks once per update: 2 updates of one
    process on 64 datapoints each; replicas and ranks bit-identical."""
    ranks = run_accumulating(tmp_path, 'adam', '--towers', '2')
    assert [calls for calls, _ in ranks[0]['step_traffic']] == [0, 0, 0, 2] * UPDATES
    main, replicas = split_replicas(ranks[0]['weights'])
    assert {'tower1/fc0/W', 'tower1/fc1/W'} <= set(replicas)
    for replica, name in replicas.items():
        assert ranks[0]['weights'][replica].tobytes() == main[name].tobytes(), replica
    reference = train_tiny.accumulated_reference(4, ACCUMULATE, BATCH, ACCUMULATE * UPDATES, 1, LR, 'adam')
    assert_close(main, reference, rtol=0, atol=1e-6)


@needs_mpiexec
def test_epoch_broadcasts_inside_updates_leave_each_ranks_accumulated_gradients_alone(tmp_path):
    """2 ranks x 2 towers, accumulate=4 over epochs of 2 steps: the broadcast of rank 0's variables
    (and into the replicas) at the end of epochs 1 and 3 falls inside an update; the accumulators
    are local variables of each tower of each rank, which it leaves alone. Each update is then
    both epochs' 32 datapoints twice: one process's steps on the 32."""
    code, output = run_ranks(2, tmp_path, '--towers', '2', '--accumulate', '4', '--optimizer', 'adam',
                             '--steps-per-epoch', '2', '--epochs', '4')
    assert code == 0, output[-6000:]
    ranks = [load_rank(tmp_path, r) for r in range(2)]
    assert_bit_identical(ranks)
    assert [calls for calls, _ in ranks[0]['step_traffic']] == [0, 0, 0, 2] * 2
    main, _ = split_replicas(ranks[0]['weights'])
    reference = train_tiny.train_single(train_tiny.make_samples(2 * BATCH * 4), 2 * BATCH * 4, LR, 1, 2,
                                        optimizer='adam')
    assert_close(main, reference, rtol=0, atol=1e-6)


@needs_mpiexec
def test_two_ranks_sum_and_only_rank0_writes(tmp_path):
    logdir = tmp_path / 'logs'
    code, output = run_ranks(2, tmp_path, '--logdir', str(logdir), '--per-rank-logdir', '--sum')
    assert code == 0, output[-6000:]
    assert 'using MPI (mpi4py' in output
    rank0, rank1 = load_rank(tmp_path, 0), load_rank(tmp_path, 1)
    assert_bit_identical([rank0, rank1])
    # summing the two per-rank mean gradients is one process's mean gradient times 2
    assert_close(rank0['weights'], reference_weights(2, 2 * LR), rtol=1e-4, atol=1e-5)
    chief = sorted(os.listdir(str(logdir / 'rank0')))
    assert {'checkpoint', 'model-{}.index'.format(STEPS * EPOCHS), 'stats.json'} <= set(chief)
    with open(str(logdir / 'rank0' / 'stats.json')) as f:
        assert [record['world_size'] for record in json.load(f)] == [2] * EPOCHS     # 2 ranks
    assert any(f.startswith('events.out.tfevents') for f in chief)
    other = sorted(os.listdir(str(logdir / 'rank1')))
    written = [f for f in other if f.startswith(('checkpoint', 'model-', 'stats', 'events', 'graph-'))]
    # only its own resume state (its data position) beside each of rank 0's checkpoints
    assert written == sorted('model-{}.resume.rank-1'.format(step) for step in (3, 6)), other


@needs_mpiexec
def test_ranks_2_1_2_keeping_the_global_batch_train_like_one_process(tmp_path):
    """Elastic training with the MPI engine: ``KeepGlobalBatch(8)`` on 2 ranks (4 each) for epoch
    1, ``mpiexec -n 1`` (8) for epoch 2, 2 ranks again for epoch 3, each run resuming rank 0's
    logger directory (rank 1, with a directory of its own, follows rank 0's schedule): each
    resize is reported by rank 0 and the weights are one process's on batches of 8."""
    logdir = tmp_path / 'logs'
    outputs = []
    for epochs, num in enumerate([2, 1, 2], start=1):
        code, output = run_ranks(num, tmp_path, '--logdir', str(logdir), '--per-rank-logdir',
                                 '--keep-global-batch', '8', '--epochs', str(epochs))
        assert code == 0, output[-6000:]
        outputs.append(output)
    for output, now, before in [(outputs[1], 1, 2), (outputs[2], 2, 1)]:
        assert output.count("with {} model replicas (towers x processes), where epoch".format(now)) == 1
        assert "KeepGlobalBatch(8) keeps the global batch at 8 ({} per replica, was {} per replica)".format(
            8 // now, 8 // before) in output
    assert "Rank 1 follows rank 0's schedule: 3 steps per epoch, epochs 3..3." in outputs[2]
    with open(str(logdir / 'rank0' / 'stats.json')) as f:
        assert [(r['world_size'], r['global_batch']) for r in json.load(f)] == [(2, 8), (1, 8), (2, 8)]
    reference = reference_weights(2, LR, max_epoch=3)
    for rank in range(2):
        assert_close(load_rank(tmp_path, rank)['weights'], reference, rtol=0, atol=1e-5)


@needs_mpiexec
def test_rank0_stopping_ends_every_rank_with_fp16_gradients(tmp_path):
    code, output = run_ranks(3, tmp_path, '--fp16', '--stop-at-step', '2', '--epochs', '3')
    assert code == 0, output[-6000:]
    assert output.count('rank 0 ended its training and shut MPI') == 2
    ranks = [load_rank(tmp_path, r) for r in range(3)]
    assert ranks[0]['global_step'] == 2
    assert_bit_identical(ranks)
    reference = reference_weights(3, LR, steps_per_epoch=2, max_epoch=1)
    assert_close(ranks[0]['weights'], reference, rtol=1e-2, atol=1e-3)   # float16 gradients
    assert any(not np.array_equal(ranks[0]['weights'][n], reference[n]) for n in reference)   # rounded


@needs_mpiexec
def test_sigterm_to_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    """Rank 1 of 3 gets SIGTERM after global step 4 of 3 epochs of 3: its vote travels with
    step 5's gradients, every rank stops after step 5 with the same weights, rank 0 writes
    model-5, every rank exits with 143."""
    code, output = run_ranks(3, tmp_path, '--sigterm', '1', '4', '--epochs', '3',
                             '--logdir', str(tmp_path / 'logs'))
    assert code == 143, output[-6000:]
    train_tiny.assert_stopped_together(tmp_path, 3, 1, 5)
    ranks = [load_rank(tmp_path, r) for r in range(3)]
    assert [r['global_step'] for r in ranks] == [5, 5, 5]
    assert_bit_identical(ranks)


@needs_mpiexec
def test_a_rerun_after_sigterm_resumes_every_rank_at_the_step_with_its_own_data(tmp_path):
    """Rank 1 of 2 gets SIGTERM after global step 4 of 3 epochs of 3: every rank stops after step 5
    (mid-epoch 2), rank 0 writes model-5 and its resume state, rank 1 its own (its data position,
    in its logger directory). The same command again resumes at step 5: rank 1 takes its own state
    back, no step runs twice, and the weights are one process's on the batches of both ranks."""
    logdir = tmp_path / 'logs'
    args = ['--epochs', '3', '--logdir', str(logdir), '--per-rank-logdir', '--resume']
    code, output = run_ranks(2, tmp_path, '--sigterm', '1', '4', *args)
    assert code == 143, output[-6000:]
    assert (logdir / 'rank0' / 'model-5.resume').exists()
    assert (logdir / 'rank1' / 'model-5.resume.rank-1').exists()
    code, output = run_ranks(2, tmp_path, *args)
    assert code == 0, output[-6000:]
    assert 'Resuming from checkpoint {} (step 2 of 3 of epoch 2, global step 5).'.format(
        logdir / 'rank0' / 'model-5') in output
    rank1_log = (tmp_path / 'rank1.log').read_text()     # mpiexec's output may drop a rank's lines
    assert 'rank-1 takes back its own state at global step 5 (step 2 of 3 of epoch 2).' in rank1_log, \
        rank1_log
    with open(str(logdir / 'rank0' / 'stats.json')) as f:
        assert [r['epoch_num'] for r in json.load(f) if 'steps_per_epoch' in r] == [1, 2, 3]
    reference = reference_weights(2, LR, max_epoch=3)
    for rank in range(2):
        assert load_rank(tmp_path, rank)['global_step'] == 9
        assert_close(load_rank(tmp_path, rank)['weights'], reference, rtol=0, atol=1e-5)


@needs_mpiexec
def test_sigterm_in_the_middle_of_an_update_stops_every_rank_at_its_end_and_the_rerun_resumes(tmp_path):
    """Issue 60: accumulate=4, 2 epochs of 8 steps; rank 1 gets SIGTERM after global step 9 (one
    micro-batch into the 3rd update, in epoch 2). The accumulating steps reduce nothing, so its
    vote travels with the next all-reduce, the update of step 12: every rank stops after step 12,
    rank 0 writes model-12, each rank its resume state. The same command again resumes at step
    12 and ends as an uninterrupted run: 4 updates of one process on 32 datapoints each."""
    logdir = tmp_path / 'logs'
    args = ['--accumulate', '4', '--optimizer', 'adam', '--steps-per-epoch', '8', '--epochs', '2',
            '--logdir', str(logdir), '--per-rank-logdir', '--resume']
    code, output = run_ranks(2, tmp_path, '--sigterm', '1', '9', *args)
    assert code == 143, output[-6000:]
    train_tiny.assert_stopped_together(tmp_path, 2, 1, 12,
                                       until='the next step that reduces (the end of this update)')
    stopped = [load_rank(tmp_path, r) for r in range(2)]
    assert [r['global_step'] for r in stopped] == [12, 12]
    assert [calls for calls, _ in stopped[0]['step_traffic']] == [0, 0, 0, 2] * 3
    assert_bit_identical(stopped)
    assert (logdir / 'rank0' / 'model-12.index').exists()
    assert (logdir / 'rank1' / 'model-12.resume.rank-1').exists()
    code, output = run_ranks(2, tmp_path, *args)
    assert code == 0, output[-6000:]
    assert 'Resuming from checkpoint {} (step 4 of 8 of epoch 2, global step 12).'.format(
        logdir / 'rank0' / 'model-12') in output
    assert 'micro-batch' not in output     # model-12 ends an update: no accumulated gradients to take back
    resumed = [load_rank(tmp_path, r) for r in range(2)]
    assert [r['global_step'] for r in resumed] == [16, 16]
    assert_bit_identical(resumed)
    reference = train_tiny.accumulated_reference(2, 4, BATCH, 8, 2, LR, 'adam')
    assert_close(resumed[0]['weights'], reference, rtol=0, atol=1e-6)


@needs_mpiexec
def test_ranks_with_different_variables_fail_with_a_clear_error(tmp_path):
    code, output = run_ranks(2, tmp_path, '--chief-only-variable')
    assert code != 0
    assert 'the ranks built different global variables' in output
    assert "rank 1 lacks ['only_on_chief']" in output


@needs_mpiexec
def test_ranks_with_different_numbers_of_towers_fail_with_a_clear_error(tmp_path):
    code, output = run_ranks(2, tmp_path, '--towers', '2', '--rank-towers', '1', '1')
    assert code != 0
    assert output.count('the ranks built different numbers of towers: 2, 1 (rank by rank)') == 2, \
        output[-6000:]


@needs_mpiexec
def test_a_failing_rank_ends_the_others_which_name_it(tmp_path):
    code, output = run_ranks(3, tmp_path, '--fail', '1', '2', '--epochs', '50')
    assert code != 0
    assert 'ValueError: rank 1 fails at step 2' in output
    for rank in (0, 2):
        assert 'rank {}: rank 1 ended its training and shut MPI'.format(rank) in output, output[-6000:]
        assert load_rank(tmp_path, rank)['global_step'] <= 3   # stopped, not 150 steps later


@needs_mpiexec
def test_a_rank_failing_before_training_aborts_the_job_instead_of_leaving_the_others_waiting(tmp_path):
    """Rank 1 raises after the engine started, before any collective of training: the others
    wait in the trainer's first collective, so the uncaught exception aborts the job (before,
    rank 1 waited in MPI_Finalize and rank 0 in its allgather until killed)."""
    code, output = run_ranks(3, tmp_path, '--raise-before-training', '1')
    assert code != 0
    # in the rank's own log: mpiexec's output may lose what a rank printed right before MPI_Abort
    assert re.search(r'MPI rank 1 \(pid \d+ on [^)]+\) ended with an uncaught RuntimeError \(rank 1 fails '
                     r'before training \(--raise-before-training\)\) before shutting MPI down: aborting the '
                     r'job', rank_logs(tmp_path, 3)), output[-6000:]
    assert not os.path.exists(os.path.join(str(tmp_path), 'rank0.json'))     # nobody trained


@needs_mpiexec
def test_plain_mpiexec_ends_the_job_of_a_killed_rank(tmp_path):
    code, output = run_ranks(3, tmp_path, '--die', '1', '2', '--epochs', '50')
    assert code != 0
    # mpiexec (hydra) kills the other ranks at once and names a process that ended with SIGKILL;
    # every rank logged its pid. Hydra may name a rank it killed itself (it reaps them together).
    named = re.findall(r'BAD TERMINATION.*?PID (\d+) RUNNING AT.*?EXIT CODE: 9', output, re.S)
    pids = [pid_of_rank(output, r, 3) for r in range(3)]
    assert len(named) == 1 and int(named[0]) in pids, output[-6000:]
    assert not [r for r in range(3) if os.path.exists(str(tmp_path / 'rank{}.json'.format(r)))]


DIED = re.compile(r'MPI rank (\d+) \(pid (\d+) on (\S+)\) died while rank (\d+) waited for it in (\w+); '
                  r'aborting the job\.')


def assert_survivors_name(code, output, out_dir, dead, num, waited_in):
    """At least one survivor named rank ``dead`` (its pid and host) while waiting in
    ``waited_in`` (in its log); nobody named another rank; the launcher wrapper saw the signal;
    the job ended with the reporter's abort (mpiexec's exit ``code``)."""
    pid = pid_of_rank(output, dead, num)
    reports = DIED.findall(rank_logs(out_dir, num))
    assert reports, output[-6000:]
    for rank, named_pid, host, reporter, where in reports:
        assert (int(rank), int(named_pid), host, where) == (dead, pid, socket.gethostname(), waited_in)
        assert int(reporter) in set(range(num)) - {dead}
    assert 'mpi_rank: MPI rank {} (pid {}) was ended by signal 9 (SIGKILL)'.format(dead, pid) in output
    # The reporter's MPI_Abort(COMM_WORLD, 1) ends the job: mpiexec exits with 1. Its message
    # ('application called MPI_Abort') is often lost: hydra stops forwarding output as it ends
    # the ranks. MPI_Abort may also crash in a process whose other threads are in MPI: the
    # wrapper then says that the reporter died of a signal while aborting the job.
    crashed = re.findall(r'mpi_rank: MPI rank (\d+) \(pid \d+\) was ended by signal \d+ \(\w+\) '
                         r'while aborting the job', output)
    assert code == 1 or (crashed and dead not in map(int, crashed)), (code, output[-6000:])


@needs_mpiexec
def test_a_killed_rank_is_named_by_a_survivor_which_ends_the_job(tmp_path):
    """SIGKILL in the middle of training, under the documented mpiexec -disable-auto-cleanup
    + cluster.mpi_rank: a rank waiting for it in the next allreduce names it and aborts."""
    code, output = run_ranks(3, tmp_path, '--die', '1', '2', '--epochs', '50', launch=SUPERVISED)
    assert code != 0
    assert_survivors_name(code, output, tmp_path, 1, 3, 'allreduce')
    assert not [r for r in range(3) if os.path.exists(str(tmp_path / 'rank{}.json'.format(r)))]


@needs_mpiexec
def test_a_rank_killed_after_the_last_collective_is_named_at_shutdown(tmp_path):
    """Rank 2 dies after the last step's allreduce (no broadcast after it): the others
    finish training, then wait for its end in shutdown() (as MPI_Finalize would, forever),
    see it gone and abort naming it."""
    code, output = run_ranks(3, tmp_path, '--die', '2', str(STEPS * EPOCHS), '--no-epoch-broadcast',
                             launch=SUPERVISED)
    assert code != 0
    assert_survivors_name(code, output, tmp_path, 2, 3, 'shutdown')
    assert [load_rank(tmp_path, r)['global_step'] for r in (0, 1)] == [STEPS * EPOCHS] * 2


@needs_mpiexec
def test_mpi_rank_ends_the_job_when_a_rank_dies_before_mpi_starts(tmp_path):
    """Nobody waits for a rank that dies before MPI_Init: after its grace, the wrapper dies
    of the same signal, and mpiexec ends the job (the others would wait in MPI_Init)."""
    rank = ("import os, signal\n"
            "if os.environ['PMI_RANK'] == '1':\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n"
            "from mpi4py import MPI\n"
            "MPI.COMM_WORLD.Barrier()\n")
    command = [MPIEXEC, '-launcher', 'fork', '-disable-auto-cleanup', '-n', '3', sys.executable, '-m',
               'tensorpack_lite.cluster.mpi_rank', '--grace', '1', sys.executable, '-c', rank]
    code, output = run_bounded(command, RUN_TIMEOUT, env=rank_env(), cwd=tmp_path)
    assert code == 9, output
    assert re.search(r'mpi_rank: MPI rank 1 \(pid \d+\) was ended by signal 9 \(SIGKILL\)', output), output
    assert 'Killed (signal 9)' in output


def test_mpi_rank_passes_exit_codes_and_names_a_signal():
    wrapper = [sys.executable, '-m', 'tensorpack_lite.cluster.mpi_rank', '--grace', '0']
    env = subprocess_env(PMI_RANK='5')
    ended = subprocess.run(wrapper + [sys.executable, '-c', 'raise SystemExit(3)'], env=env,
                           capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert (ended.returncode, ended.stderr) == (3, '')
    suicide = 'import os; os.kill(os.getpid(), 15)'
    killed = subprocess.run(wrapper + ['--', sys.executable, '-c', suicide],
                            env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert killed.returncode == -15   # it dies of the same signal after its grace
    assert re.fullmatch(r'mpi_rank: MPI rank 5 \(pid \d+\) was ended by signal 15 \(SIGTERM\)\n',
                        killed.stderr)
    # hydra's SIGUSR1 after the death (another rank ended: the job is ending) ends the grace
    waiting = subprocess.Popen(wrapper[:-1] + ['600', sys.executable, '-c', suicide],
                               env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert waiting.stderr.readline().startswith('mpi_rank: MPI rank 5 (pid ')
        waiting.send_signal(signal.SIGUSR1)
        assert waiting.wait(timeout=RUN_TIMEOUT) == 128 + 15
    finally:
        waiting.kill()
        waiting.communicate()
    # a rank that said it is aborting the job (then crashed in MPI_Abort) ends it at once
    aborting = subprocess.run(wrapper[:-1] + ['600', sys.executable, '-c', "import os\n"
                              "os.write(int(os.environ['TENSORPACK_MPI_RANK_FD']), b'aborting')\n" + suicide],
                              env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert aborting.returncode == 128 + 15
    assert aborting.stderr.endswith('was ended by signal 15 (SIGTERM) while aborting the job\n')
    missing = subprocess.run(wrapper + ['no-such-command-xyz'], env=env, capture_output=True, text=True,
                             timeout=RUN_TIMEOUT)
    assert missing.returncode == 127 and 'mpi_rank: cannot run no-such-command-xyz' in missing.stderr


def test_dead_local_peers_finds_ended_processes():
    ended = subprocess.Popen([sys.executable, '-c', 'pass'])
    ended.wait()   # reaped: its pid is gone
    zombie = subprocess.Popen([sys.executable, '-c', 'pass'])
    try:
        zombie_process = psutil.Process(zombie.pid)
        while zombie_process.status() != psutil.STATUS_ZOMBIE:   # not reaped yet: a zombie
            time.sleep(0.01)
        host = socket.gethostname()
        peers = [(os.getpid(), host), (ended.pid, host), (zombie.pid, host), (ended.pid, 'elsewhere')]
        assert mpi_ops.dead_local_peers(peers, rank=0) == [1, 2]
        assert mpi_ops.dead_local_peers(peers[:1], rank=0) == []
    finally:
        zombie.wait()
