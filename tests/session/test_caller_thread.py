"""Which compiled runs execute their ops in the caller's thread (tensorpack_lite.session.caller_thread):
only where it is safe (nothing waits for another op of the run, in a function body either) and it
wins (a small run, or one inter-op thread asked for); the switch overrides."""

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.profiling.flops import count_flops
from tensorpack_lite.session.caller_thread import (SMALL_RUN_FLOPS, SWITCH, run_in_caller_thread,
                                                   runs_safely_in_caller_thread)
from tensorpack_lite.session.hooked_session import HookedSession


def _matmul_step(width):
    """A train op whose run counts ``2 * batch * width * width`` FLOPs forward (and the gradient's)."""
    x = tfv1.placeholder(tf.float32, [None, width], name='x')
    w = tfv1.get_variable('w', initializer=np.eye(width, dtype=np.float32))
    cost = tf.reduce_mean(tf.matmul(x, w))
    return x, w, cost, tfv1.train.GradientDescentOptimizer(0.1).minimize(cost)


@pytest.mark.quick
def test_runs_that_wait_or_span_devices_use_the_thread_pool(monkeypatch):
    queue = tfv1.FIFOQueue(4, [tf.float32], shapes=[[]])
    dequeued = queue.dequeue() + 1.0
    assert not runs_safely_in_caller_thread([dequeued])
    assert not runs_safely_in_caller_thread([queue.enqueue([1.0])])
    with tf.device('/cpu:0'):
        a = tf.constant(1.0)
    with tf.device('/cpu:1'):
        b = a + 1.0
    assert not runs_safely_in_caller_thread([b])      # two devices: sends and receives
    assert runs_safely_in_caller_thread([a * 2.0])
    monkeypatch.setattr(tf.config, 'list_physical_devices',
                        lambda kind=None: ['GPU:0'] if kind == 'GPU' else [])
    assert not runs_safely_in_caller_thread([a * 2.0])  # a process with a GPU: left to TensorFlow


def test_op_types_are_matched_whatever_their_case():
    """'Unstage' (a staging area's get) waits for its 'Stage' as much as the put itself."""
    area = tfv1.raw_ops.Unstage(dtypes=[tf.float32], shared_name='area')
    assert not runs_safely_in_caller_thread([area[0]])


def test_a_while_loop_whose_body_dequeues_uses_the_thread_pool():
    queue = tfv1.FIFOQueue(4, [tf.float32], shapes=[[]])

    def body(i, total):
        return i + 1, total + queue.dequeue()
    _, total = tfv1.while_loop(lambda i, _: i < 3, body, [tf.constant(0), tf.constant(0.0)])
    loop_ops = {op.type for op in total.graph.get_operations()}
    assert 'While' in loop_ops or 'StatelessWhile' in loop_ops, loop_ops   # control flow v2: a function
    assert not any('Queue' in kind for kind in loop_ops if 'While' not in kind and kind != 'FIFOQueueV2'), \
        loop_ops   # the dequeue is in the body, not in the graph
    assert not runs_safely_in_caller_thread([total])
    # the same loop adding constants runs anywhere
    _, plain = tfv1.while_loop(lambda i, _: i < 3, lambda i, t: (i + 1, t + 1.0),
                               [tf.constant(0), tf.constant(0.0)])
    assert runs_safely_in_caller_thread([plain])


def test_small_runs_go_in_the_caller_thread_and_large_ones_to_the_pool():
    _, _, _, train_op = _matmul_step(64)
    small, large = np.zeros((8, 64), np.float32), np.zeros((20000, 64), np.float32)
    assert count_flops([train_op], 8) <= SMALL_RUN_FLOPS < count_flops([train_op], 20000)
    assert run_in_caller_thread([train_op], [small])
    assert not run_in_caller_thread([train_op], [large])
    assert not run_in_caller_thread([train_op], [])   # FLOPs unknown (no batch): the pool


def test_the_sessions_inter_op_threads_are_respected():
    _, _, _, train_op = _matmul_step(64)
    small, large = np.zeros((8, 64), np.float32), np.zeros((20000, 64), np.float32)
    one = tfv1.ConfigProto(inter_op_parallelism_threads=1)
    four = tfv1.ConfigProto(inter_op_parallelism_threads=4)
    assert run_in_caller_thread([train_op], [large], one)         # nothing runs at once anyway
    assert not run_in_caller_thread([train_op], [small], four)    # a pool asked for
    assert run_in_caller_thread([train_op], [small], tfv1.ConfigProto())   # left to TensorFlow: by size


def test_the_switch_overrides_the_choice_but_not_safety(monkeypatch):
    _, _, _, train_op = _matmul_step(64)
    small, large = np.zeros((8, 64), np.float32), np.zeros((20000, 64), np.float32)
    queue = tfv1.FIFOQueue(4, [tf.float32], shapes=[[]])
    monkeypatch.setenv(SWITCH, '0')
    assert not run_in_caller_thread([train_op], [small])
    monkeypatch.setenv(SWITCH, '1')
    assert run_in_caller_thread([train_op], [large])
    assert not run_in_caller_thread([queue.dequeue()])
    monkeypatch.setenv(SWITCH, 'sometimes')
    with pytest.raises(ValueError, match=SWITCH + ".*'sometimes'.*0, 1 or auto"):
        run_in_caller_thread([train_op], [small])


def test_the_hooked_session_compiles_each_run_by_the_rule_with_the_same_results(monkeypatch):
    x, w, cost, train_op = _matmul_step(64)
    results = {}
    for switch in ('0', '1'):
        monkeypatch.setenv(SWITCH, switch)
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            hooked = HookedSession(sess, [tfv1.train.SessionRunHook()])
            batch = np.arange(8 * 64, dtype=np.float32).reshape(8, 64) / 512
            costs = [hooked.run([cost, train_op], feed_dict={x: batch})[0] for _ in range(3)]
            (compiled,) = hooked._cache._compiled.values()
            assert compiled.in_caller_thread == (switch == '1')
            results[switch] = (costs, sess.run(w))
    np.testing.assert_array_equal(results['0'][0], results['1'][0])
    np.testing.assert_array_equal(results['0'][1], results['1'][1])
