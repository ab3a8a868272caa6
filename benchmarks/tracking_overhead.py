#!/usr/bin/env python
"""What MLflowMonitor costs a training run, with its tracking server up and with the server gone
mid-run, against the same run without it and a bare ``sess.run(train_op)`` loop, in one run.

The model is the MLP 784-256-10 of trainer_overhead.py, batch 64. Paths:
  (a) bare:            ``sess.run(train_op)`` on a batch in the graph
  (b) default path:    DataFlow -> default InputSource -> SimpleTrainer, default callbacks and monitors
  (c) + MLflowMonitor: (b) with an MLflowMonitor sending to a local ``mlflow server`` (SQLite)
  (d) server gone:     (c) with the server killed after the first epoch (restarted after the run)
For each, the whole of ``launch_train_with_config`` is timed (set-up, every epoch, the end of
training, where the monitor flushes), and the epochs after the first (the steady state). The
paths run one after the other in rounds, in alternating order; printed: the median of each,
and the ratios to (b) and to (a). MLflow's client keeps its default retries (as a user has
them). Every step puts a scalar ('step_value'), so the monitor sends one value a step.

    python benchmarks/tracking_overhead.py --rounds 5
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from tensorpack_lite import tfv1 as tf
from tensorpack_lite.callbacks import Callback, MLflowMonitor
from tensorpack_lite.cluster.config import held_free_port
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.train import DEFAULT_MONITORS, SimpleTrainer, TrainConfig, launch_train_with_config
from tensorpack_lite.utils import logger
from timing import EpochTimer
from trainer_overhead import MLP, bare_loop, make_batches


class PutAndMaybeKill(Callback):
    """Puts 'step_value' after every step; after the first epoch, kills ``server`` if given."""

    def __init__(self, server=None):
        self.server = server

    def _trigger_step(self):
        self.trainer.monitors.put_scalar('step_value', self.global_step)

    def _trigger_epoch(self):
        if self.server is not None and self.epoch_num == 1:
            self.server.kill()


class Server:
    def __init__(self, directory):
        self.directory = directory
        with held_free_port() as port:
            self.uri = 'http://127.0.0.1:{}'.format(port)
        self.port = port
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            [os.path.join(os.path.dirname(sys.executable), 'mlflow'), 'server', '--backend-store-uri',
             'sqlite:///{}/mlflow.db'.format(self.directory), '--artifacts-destination',
             os.path.join(self.directory, 'artifacts'), '--host', '127.0.0.1', '--port', str(self.port),
             '--workers', '1'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            env=dict(os.environ, MLFLOW_SERVER_ENABLE_JOB_EXECUTION='false'))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.uri + '/health', timeout=2):
                    return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("the MLflow server did not start")

    def kill(self):
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self.proc = None


def library_path(batches, epochs, logdir, server=None, kill=False):
    """(b), (c), (d): the whole run's time and its epochs' times."""
    with tf.Graph().as_default():
        logger.set_logger_dir(logdir, action='d')
        timer = EpochTimer()
        monitors = DEFAULT_MONITORS()
        if server is not None:
            monitors.append(MLflowMonitor(server.uri, experiment_name='overhead'))
        config = TrainConfig(model=MLP(), dataflow=DataFromList(batches, shuffle=False),
                             callbacks=[timer, PutAndMaybeKill(server if kill else None)],
                             monitors=monitors, steps_per_epoch=len(batches), max_epoch=epochs)
        start = time.perf_counter()
        launch_train_with_config(config, SimpleTrainer())
        return time.perf_counter() - start, timer.times


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--epochs', type=int, default=4)
    parser.add_argument('--steps', type=int, default=200, help='steps per epoch')
    parser.add_argument('--rounds', type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault('TENSORPACK_PROGRESS_REFRESH', '30')
    batches = make_batches(args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(tmp)
        server.start()
        names = ('(a) bare', '(b) default path', '(c) + MLflowMonitor', '(d) server gone')
        whole = {name: [] for name in names}
        steady = {name: [] for name in whole}
        for round_index in range(args.rounds):
            order = list(whole) if round_index % 2 == 0 else list(reversed(list(whole)))
            for name in order:
                logdir = os.path.join(tmp, 'run-{}-{}'.format(round_index, name[1]))
                if name == '(a) bare':
                    start = time.perf_counter()
                    times = bare_loop(MLP, batches, args.epochs, feed=False)
                    total = time.perf_counter() - start
                elif name == '(b) default path':
                    total, times = library_path(batches, args.epochs, logdir)
                elif name == '(c) + MLflowMonitor':
                    total, times = library_path(batches, args.epochs, logdir, server)
                else:
                    total, times = library_path(batches, args.epochs, logdir, server, kill=True)
                    server.start()
                whole[name].append(total)
                steady[name].append(sum(times[1:]))
        server.kill()
    print("\n{} steps of batch 64 per epoch, {} epochs, {} rounds; medians (seconds):".format(
        args.steps, args.epochs, args.rounds))
    base, bare = statistics.median(whole['(b) default path']), statistics.median(steady['(a) bare'])
    for name in whole:
        w, s = statistics.median(whole[name]), statistics.median(steady[name])
        print("{:22s} whole run {:7.3f}  x{:.3f} of (b)   epochs 2..{} {:7.3f}  x{:.3f} of (a)".format(
            name, w, w / base, args.epochs, s, s / bare))


if __name__ == '__main__':
    main()
