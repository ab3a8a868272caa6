#!/usr/bin/env python
"""What starting a job on Ray costs against the launcher: the time from the call that starts a
2-worker CollectiveAllReduceTrainer job until its first training step has run, with

- ``launch(...)`` (tensorpack_lite.cluster.launch), the tasks in a private network of the job
  (the default), and with ``isolate=False``;
- ``launch_on_ray(...)`` (tensorpack_lite.cluster.ray) on a local Ray cluster started once by this
  script (a head without CPUs and two nodes of one CPU each, Ray's cluster utilities; its own
  start-up is printed apart), placement SPREAD: every call places new actors, which start the
  tasks.

The job is this file with ``--task OUT``: a 64 -> 32 -> 10 MLP on random data, batch 16 per
worker, one epoch of 5 steps; the chief writes the wall-clock time at the end of its first step
to OUT/first-step. ``--repeat`` runs of each way, in rotating order (one untimed run of each
first). Printed: every run, the medians, and the ratios of the medians to the launcher's.

    python benchmarks/ray_startup.py               # about 3 minutes on 2 cores
    python benchmarks/ray_startup.py --repeat 1
"""

import argparse
import io
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)


def task(out):
    """One task of the job (its cluster from TF_CONFIG or from Ray)."""
    import numpy as np

    from tensorpack_lite.callbacks import Callback
    from tensorpack_lite.compat import tf, tfv1
    from tensorpack_lite.dataflow import BatchData, DataFromList
    from tensorpack_lite.multiprocess.server import create_server
    from tensorpack_lite.train import ModelDesc, TrainConfig, launch_train_with_config
    from tensorpack_lite.train.distributed import CollectiveAllReduceTrainer
    from tensorpack_lite.train.horovod_trainer import RankShardData

    class Model(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None, 64], tf.float32, 'x'), tf.TensorSpec([None], tf.int32, 'y')]

        def build_graph(self, x, y):
            hidden = tf.nn.relu(tf.matmul(x, tfv1.get_variable('w0', [64, 32])))
            logits = tf.matmul(hidden, tfv1.get_variable('w1', [32, 10]))
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                                  name='cost')

        def optimizer(self):
            return tfv1.train.GradientDescentOptimizer(0.1)

    class FirstStep(Callback):
        def _trigger_step(self):
            if self.trainer.loop.global_step == 1:
                with open(os.path.join(out, 'first-step'), 'w') as f:
                    f.write(repr(time.time()))

    trainer = CollectiveAllReduceTrainer(['/cpu:0'], create_server())
    rng = np.random.RandomState(0)
    data = [[rng.randn(64).astype('float32'), int(rng.randint(10))] for _ in range(160)]
    shard = RankShardData(DataFromList(data, shuffle=False), trainer.task_index, trainer.num_worker)
    df = BatchData(shard, 16)
    launch_train_with_config(TrainConfig(model=Model(), dataflow=df, callbacks=[FirstStep()], monitors=[],
                                         steps_per_epoch=5, max_epoch=1), trainer)


def env():
    return dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(HERE)), TF_CPP_MIN_LOG_LEVEL='2',
                CUDA_VISIBLE_DEVICES='')


def first_step_after(start, out):
    with open(os.path.join(out, 'first-step')) as f:
        return float(f.read()) - start


def run_launcher(isolate):
    from tensorpack_lite.cluster.launch import launch
    out = tempfile.mkdtemp(prefix='ray-startup-')
    start = time.time()
    code = launch([sys.executable, HERE, '--task', out], 2, env=env(), output=io.BytesIO(), timeout=600,
                  isolate=isolate)
    if code != 0:
        raise RuntimeError("the launcher's job failed with exit code {}".format(code))
    return first_step_after(start, out)


def run_ray():
    from tensorpack_lite.cluster.ray import launch_on_ray
    out = tempfile.mkdtemp(prefix='ray-startup-')
    start = time.time()
    job = launch_on_ray([sys.executable, HERE, '--task', out], 2, placement='SPREAD', env=env(), timeout=600,
                        max_restarts=0, output=io.StringIO())
    if job.exit_code != 0:
        raise RuntimeError("the Ray job failed:\n{}".format(job.describe()))
    return first_step_after(start, out)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--repeat', type=int, default=3)
    parser.add_argument('--task', help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task:
        return task(args.task)
    import ray
    from ray.cluster_utils import Cluster
    start = time.time()
    cluster = Cluster(initialize_head=True, head_node_args={'num_cpus': 0, 'include_dashboard': False})
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, log_to_driver=False)
        print("local Ray cluster (head + 2 nodes) up in {:.2f} s (ray {})".format(time.time() - start,
                                                                                  ray.__version__))
        ways = [('launcher (private network)', lambda: run_launcher(True)),
                ('launcher (isolate=False)', lambda: run_launcher(False)),
                ('launch_on_ray', run_ray)]
        times = {name: [] for name, _ in ways}
        for name, way in ways:       # untimed
            way()
        for round_ in range(args.repeat):
            order = ways[round_ % len(ways):] + ways[:round_ % len(ways)]
            for name, way in order:
                times[name].append(way())
                print("round {}: {:<28} first step after {:.2f} s".format(round_ + 1, name, times[name][-1]),
                      flush=True)
        base = statistics.median(times[ways[0][0]])
        print("\n{:<28} {:>10} {:>12}".format('call -> first step', 'median s', 'x launcher'))
        for name, _ in ways:
            median = statistics.median(times[name])
            print("{:<28} {:>10.2f} {:>12.2f}".format(name, median, median / base))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == '__main__':
    main()
