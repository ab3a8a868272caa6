"""backprop_order: the order in which backprop produces gradients, read from the graph; and
consecutive_groups, the runs of it that travel together."""

import collections
import sys

import pytest

from helpers.timing import run_or_hang
from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.graph_builder import backprop_order as backprop_order_module
from tensorpack_lite.graph_builder.backprop_order import backprop_order, consecutive_groups, op_depths

LAYERS = (12, 10, 8, 3)


def mlp_gradients():
    """The gradients of a 3-layer MLP's variables, in the variables' order
    [fc0/W, fc0/b, fc1/W, fc1/b, fc2/W, fc2/b]."""
    x = tf.random.normal([5, LAYERS[0]], seed=1)
    variables, out = [], x
    for index, (fan_in, fan_out) in enumerate(zip(LAYERS, LAYERS[1:])):
        w = tfv1.get_variable('fc{}/W'.format(index), [fan_in, fan_out])
        b = tfv1.get_variable('fc{}/b'.format(index), [fan_out])
        variables += [w, b]
        out = tf.matmul(out, w) + b
        if index < len(LAYERS) - 2:
            out = tf.nn.relu(out)
    cost = tf.reduce_mean(tf.square(out))
    return tf.gradients(cost, variables)


def test_the_last_layers_gradients_come_first_and_each_layer_together():
    with tf.Graph().as_default():
        order = backprop_order(mlp_gradients())
    assert sorted(order[:2]) == [4, 5] and sorted(order[2:4]) == [2, 3] and sorted(order[4:]) == [0, 1]


def test_the_order_is_the_same_for_every_worker_building_the_same_model():
    orders = []
    for _ in range(2):
        with tf.Graph().as_default():
            orders.append(backprop_order(mlp_gradients()))
    assert orders[0] == orders[1]


def test_depth_counts_the_longest_chain_of_inputs_and_control_inputs():
    with tf.Graph().as_default():
        a = tf.constant(1.0)
        b = a + 1.0                          # depth 1 (the constant 1.0 is 0)
        c = b * 2.0                          # depth 2
        with tf.control_dependencies([c]):
            d = tf.identity(a)               # after c: depth 3, though its input is at depth 0
        e = a - 1.0                          # depth 1
        depths = op_depths([d.op, e.op])
        assert [depths[t.op] for t in (a, b, c, d, e)] == [0, 1, 2, 3, 1]
        assert backprop_order([d, b, e, c]) == [1, 2, 3, 0]     # equal depths keep their order


Tensor = collections.namedtuple('Tensor', ['op'])


class Op:
    """What op_depths reads of an op: the ops of its inputs, and its control inputs."""

    def __init__(self, name, *inputs):
        self.name, self.inputs, self.control_inputs = name, [Tensor(op) for op in inputs], []

    def __repr__(self):
        return self.name


def test_a_cycle_shares_one_depth_after_everything_it_needs():
    """A TF1 loop, as v1 control flow builds it: Merge takes Enter, then the iteration before
    from NextIteration; the body needs a chain from outside; Exit is the loop's result. The
    cycle's ops share one depth, 1 + the largest depth of what they need from outside it (here
    the chain's, deeper than Enter), and its result comes after; in any order of the roots."""
    enter, first = Op('Enter'), Op('c0')
    chain = Op('c2', Op('c1', first))
    merge = Op('Merge', enter)
    switch = Op('Switch', merge)
    body = Op('body', switch, chain)
    merge.inputs.append(Tensor(Op('NextIteration', body)))
    exit_ = Op('Exit', switch)
    after = Op('after', exit_)
    for roots in ([after], [body, after], [merge.inputs[1].op, enter, after]):
        depths = run_or_hang(op_depths, roots)      # a walk that goes round the cycle never returns
        assert [depths[op] for op in (enter, first, chain)] == [0, 0, 2], roots
        assert {depths[op] for op in (merge, switch, body, merge.inputs[1].op)} == {3}, roots
        assert (depths[exit_], depths[after]) == (4, 5), roots


def test_each_op_is_read_once_and_deep_graphs_need_no_recursion(monkeypatch):
    """A lattice (every op needs both ops of the layer before: 2^30 paths to the bottom), then a
    chain longer than Python's recursion limit: the inputs of each op are read once."""
    reads = []
    read = backprop_order_module._before
    monkeypatch.setattr(backprop_order_module, '_before', lambda op: reads.append(op) or read(op))
    length = sys.getrecursionlimit() + 100
    with tf.Graph().as_default() as graph:
        left = right = tf.constant(1.0)
        for _ in range(30):
            left, right = left + right, left * right
        chain = left
        for _ in range(length):
            chain = tf.identity(chain)
        depths = op_depths([chain.op, right.op])
    assert len(reads) == len(set(reads)) == len(graph.get_operations()) == 1 + 2 * 30 + length
    assert (depths[chain.op], depths[left.op], depths[right.op]) == (30 + length, 30, 30)


@pytest.mark.parametrize('sizes, limit, expected', [
    ([1, 1, 8, 1, 6, 1], 5, [[0, 1, 2], [3, 4], [5]]),     # a run ends once it reaches 5
    ([10, 10, 10], 5, [[0], [1], [2]]),
    ([1, 1, 1], 100, [[0, 1, 2]]),
    ([], 5, []),
])
def test_consecutive_groups_end_once_they_reach_the_limit(sizes, limit, expected):
    assert consecutive_groups(list(range(len(sizes))), sizes, limit) == expected


def test_consecutive_groups_follow_the_order_given():
    assert consecutive_groups([2, 0, 1], [4, 4, 4], 8) == [[2, 0], [1]]
    assert consecutive_groups([2, 0, 1], [4, 4, 5], 5) == [[2], [0, 1]]
