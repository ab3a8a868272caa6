"""Whether a compiled session run executes its ops in the calling thread.

TensorFlow hands every run's ops to its inter-op thread pool: a fixed cost of tens of
microseconds per run (docs/efficiency.md), which is a tenth of a small model's step. With
``RunOptions.inter_op_thread_pool = -1`` the ops run one after the other in the caller's thread
instead: no hand-off, but no two ops at once either, which costs a model whose step has many
independent ops (a ResNet's backward pass) a quarter of its speed on two cores. So
:class:`~tensorpack_lite.session.hooked_session.HookedSession` asks :func:`run_in_caller_thread`,
which says yes only where it is safe and it wins:

* **safe** (:func:`runs_safely_in_caller_thread`): a process without GPU, the run's ops on one
  device, none of them (nor any op of a function they call: a ``tf.while_loop``'s body...)
  waiting for another op of the same run (queues, staging areas, collectives, sends and
  receives, barriers, accumulators), which one thread could wait for for ever;
* **wins**: the session's ``inter_op_parallelism_threads`` is 1 (nothing runs at once anyway),
  or it is left to TensorFlow (0) and the run is small: at most :data:`SMALL_RUN_FLOPS`
  floating-point operations (:func:`~tensorpack_lite.profiling.flops.count_flops`, the batch
  read from the fed arrays), where the hand-off is a noticeable part of the step and there is
  little to run at once. A session with more than one inter-op thread asked for keeps its pool.

The switch ``TENSORPACK_LITE_CALLER_THREAD_RUNS`` overrides the choice: ``0`` never, ``1``
wherever it is safe, ``auto`` (or unset) as above.
"""

import os

from ..compat import tf
from ..profiling.flops import count_flops
from ..profiling.graph_walk import ops_run_by
from ..utils.gpu import num_tensorflow_gpus

__all__ = ['SWITCH', 'SMALL_RUN_FLOPS', 'WAITING_OP_KINDS', 'runs_safely_in_caller_thread',
           'run_in_caller_thread']

SWITCH = 'TENSORPACK_LITE_CALLER_THREAD_RUNS'
"""The environment variable that overrides the choice: '0', '1' or 'auto' (the default)."""

SMALL_RUN_FLOPS = 2e8
"""The largest run (in FLOPs) that runs in the caller's thread when the session leaves its
inter-op threads to TensorFlow: about a millisecond of arithmetic on two cores, where the
pool's hand-off costs some percent of the step (docs/efficiency.md#runs-in-the-callers-thread)."""

WAITING_OP_KINDS = ('queue', 'stage', 'collective', 'nccl', 'send', 'recv', 'barrier', 'accumulator')
"""Parts of op type names (compared in lower case: ``Unstage`` is one) of the ops that wait
for another op of the same run."""

_FUNCTION_ATTRS = ('f', 'body', 'cond', 'then_branch', 'else_branch', 'branches')


def _waits(op_type):
    kind = op_type.lower()
    return any(part in kind for part in WAITING_OP_KINDS)


def _called_functions(node_attrs):
    """The names of the functions a node calls, from its attributes (a map of AttrValue)."""
    names = []
    for key in _FUNCTION_ATTRS:
        if key not in node_attrs:
            continue
        value = node_attrs[key]
        if value.HasField('func'):
            names.append(value.func.name)
        elif value.HasField('list'):
            names.extend(f.name for f in value.list.func)
    return names


def _functions_wait(names, library):
    """Whether any op of the functions ``names`` (or of a function they call) waits."""
    pending, seen = list(names), set()
    while pending:
        name = pending.pop()
        if name in seen or name not in library:
            continue
        seen.add(name)
        for node in library[name].node_def:
            if _waits(node.op):
                return True
            pending.extend(_called_functions(node.attr))
    return False


def runs_safely_in_caller_thread(fetched):
    """Whether the ops that running ``fetched`` (tensors and ops) needs can run one after the
    other in one thread: a process without GPU, the ops on one device, none of them waiting
    for another (:data:`WAITING_OP_KINDS`, looked for in the functions they call too)."""
    if num_tensorflow_gpus():
        return False
    devices, calls = set(), []
    for op in ops_run_by(fetched):
        if _waits(op.type):
            return False
        if op.device:
            devices.add(tf.DeviceSpec.from_string(op.device).to_string())
            if len(devices) > 1:
                return False
        calls.extend(_called_functions(op.node_def.attr))
    if calls:
        graph = fetched[0].graph
        library = {f.signature.name: f for f in graph.as_graph_def().library.function}
        return not _functions_wait(calls, library)
    return True


def _fed_batch(feeds):
    """The largest leading dimension of the fed arrays (the batch), or None."""
    sizes = [value.shape[0] for value in feeds if getattr(value, 'ndim', 0) >= 1]
    return max(sizes) if sizes else None


def run_in_caller_thread(fetched, feeds=(), session_config=None):
    """Whether a compiled run of ``fetched`` (tensors and ops) with the arrays ``feeds``, in a
    session of ``session_config`` (a ConfigProto or None), runs its ops in the caller's thread:
    where it is safe and it wins (see the module's text), unless :data:`SWITCH` says otherwise."""
    switch = os.environ.get(SWITCH, 'auto').strip().lower()
    if switch not in ('0', '1', 'auto', ''):
        raise ValueError("{}={!r}: expected 0, 1 or auto".format(SWITCH, os.environ[SWITCH]))
    if switch == '0' or not runs_safely_in_caller_thread(fetched):
        return False
    if switch == '1':
        return True
    threads = session_config.inter_op_parallelism_threads if session_config is not None else 0
    if threads != 0:   # asked for: 1 (or a negative number, TensorFlow's own 'in the caller') or a pool
        return threads <= 1
    flops = count_flops(fetched, _fed_batch(feeds))
    return flops is not None and flops <= SMALL_RUN_FLOPS
