"""What the multi-process benchmarks share (no TensorFlow is imported here): the environment of
their workers, the result line a worker prints and its driver reads back, the timing of a
callable inside a worker, and a run of N workers on this machine through the launcher.

    # in a worker
    report({'seconds': time_runs(step, repeat=40)[0]})
    # in the driver
    result = run_local_cluster([sys.executable, __file__, '--role', 'worker'], 2, '2 workers')
"""

import io
import json
import os
import re
import statistics
import sys
import time

__all__ = ['REPO', 'RESULT_PREFIX', 'worker_env', 'report', 'read_result', 'time_runs', 'run_local_cluster']

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_PREFIX = 'BENCHMARK_RESULT '


def worker_env(**extra):
    """This environment for a worker: the repository importable, TensorFlow quiet, no GPU."""
    return dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL='2', CUDA_VISIBLE_DEVICES='', **extra)


def report(result):
    """Print ``result`` (JSON) on the line the driver reads (see :func:`read_result`)."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def read_result(output, what, code=0):
    """The last result :func:`report` ed in ``output``; exits naming ``what``, with the exit
    ``code`` and the end of the output, when the run failed or reported nothing."""
    found = re.findall(re.escape(RESULT_PREFIX) + r'(\{.*\})', output)
    if code != 0 or not found:
        sys.exit("{} failed (exit code {}):\n{}".format(what, code, output[-4000:]))
    return json.loads(found[-1])


def time_runs(run, repeat, warmup=3):
    """(the median seconds of ``repeat`` calls of ``run()`` after ``warmup`` calls, the cores
    this process kept busy meanwhile: its CPU seconds, all threads, over the wall seconds)."""
    for _ in range(warmup):
        run()
    times = []
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    cores = (time.process_time() - cpu_start) / (time.perf_counter() - wall_start)
    return statistics.median(times), cores


def run_local_cluster(command, num_worker, what, timeout=1200, env=None):
    """Run ``command`` as ``num_worker`` workers of a local cluster (TF_CONFIG from
    :class:`~tensorpack_lite.cluster.launch.LocalCluster`) and return the chief's result."""
    from tensorpack_lite.cluster.launch import LocalCluster
    output = io.BytesIO()
    cluster = LocalCluster([str(part) for part in command], num_worker, env=env or worker_env(),
                           output=output)
    cluster.start()
    code = cluster.wait(timeout=timeout)
    return read_result(output.getvalue().decode('utf-8', 'replace'), what, code)
