"""Checks of graph_builder/mpi_ops.py across real ranks, for tests/distributed/test_mpi.py::

    mpiexec -n 3 python mpi_facade.py

Every rank asserts the results it can compute itself (rank r's inputs are known to all) and
that its bytes equal rank 0's, then prints ``rank <r>: OK``.
"""

import hashlib

import numpy as np

from tensorpack_lite.compat import enable_graph_mode, tf, tfv1
from tensorpack_lite.graph_builder import mpi_ops as hvd


def inputs_of(rank, n=300001):
    """Rank ``rank``'s float32 values: spread over many magnitudes, so that the order of the
    additions shows in the bits."""
    rng = np.random.RandomState(rank)
    return (rng.randn(n) * 10.0 ** rng.uniform(-4, 3, n)).astype(np.float32)


def same_on_every_rank(array):
    digest = hashlib.md5(np.ascontiguousarray(array).tobytes()).hexdigest()
    digests = hvd._get().world.allgather(digest)
    assert len(set(digests)) == 1, digests


def main():
    enable_graph_mode()
    hvd.init()
    r, n = hvd.rank(), hvd.size()
    everyone = [inputs_of(k) for k in range(n)]
    x = tf.constant(everyone[r])
    v = tfv1.get_variable('v', initializer=np.full([4], r + 1.0, np.float32))
    small = tf.constant(np.arange(4, dtype=np.float32) + r)
    with hvd.ordered_collectives():
        total = hvd.allreduce(x, op=hvd.Sum)
        mean = hvd.allreduce(x, op=hvd.Average)
        fp16 = hvd.allreduce(x, op=hvd.Sum, compression=hvd.Compression.fp16)
        weighted = hvd.allreduce(small * v, op=hvd.Average)
        grad = tf.gradients(tf.reduce_sum(weighted * weighted), [v])[0]
        gathered = hvd.allgather(tf.fill([r + 1, 2], r))
        from_last = hvd.broadcast(small, root_rank=n - 1)
    assign = hvd.broadcast_variables([v], root_rank=n - 1)
    with tfv1.Session() as sess:
        sess.run(v.initializer)
        t, m, h, w, g, a, b = sess.run([total, mean, fp16, weighted, grad, gathered, from_last])
        sess.run(assign)
        v_after = sess.run(v)
    for value in (t, m, h, w):   # (the gradient differs: it is times this rank's input)
        same_on_every_rank(value)
    exact = np.sum([e.astype(np.float64) for e in everyone], axis=0)
    scale = np.max(np.abs(everyone), axis=0)   # float32 rounding of the sum, not of each input
    assert np.all(np.abs(t - exact) <= 4 * n * np.finfo(np.float32).eps * scale)
    np.testing.assert_array_equal(m, (t / np.float32(n)).astype(np.float32))
    sixteen = np.sum([e.astype(np.float16).astype(np.float32) for e in everyone], axis=0).astype(np.float16)
    np.testing.assert_array_equal(h, sixteen.astype(np.float32))   # added in float32, rounded once
    smalls = [np.arange(4, dtype=np.float32) + k for k in range(n)]
    mean_w = np.mean([s * (k + 1) for k, s in enumerate(smalls)], axis=0)
    np.testing.assert_allclose(w, mean_w, rtol=1e-6)
    # d/dv_r of sum(weighted^2): the mean over ranks of 2*weighted, times small_r
    np.testing.assert_allclose(g, 2 * mean_w * smalls[r], rtol=1e-6)
    assert a.tolist() == [[k, k] for k in range(n) for _ in range(k + 1)]
    assert b.tolist() == smalls[n - 1].tolist() and v_after.tolist() == [float(n)] * 4
    print('rank {}: OK'.format(r), flush=True)
    hvd.shutdown()


if __name__ == '__main__':
    main()
