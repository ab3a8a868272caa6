"""The end of a QueueInput run is quiet (issue 15): no TF step fails when the enqueue thread
stops, so TensorFlow's runtime prints no 'CANCELLED: Enqueue operation was cancelled'
(its local rendezvous logs that to stderr, at warning level, for every failed step).

The run happens in a fresh interpreter with TensorFlow's C++ logging fully on, its stderr
captured. The queue is full when training ends (a callback waits for it at the end of the
last epoch), so the enqueue thread is blocked in an enqueue when it is stopped: the case that
printed the line."""

import subprocess
import sys
import textwrap
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR

# QueueInput's default queue holds 50 datapoints.
SCRIPT = textwrap.dedent('''
    import time

    import numpy as np

    from tensorpack_lite.callbacks.base import Callback
    from tensorpack_lite.dataflow import DataFromList
    from tensorpack_lite.input_source.queue import QueueInput
    from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config
    from helpers.models import PointMean     # tests/ is on the PYTHONPATH (helpers.subprocess_env)


    class FullQueueAtTheEnd(Callback):
        """At the end of the last epoch, waits until the enqueue thread has filled the queue
        (it is then blocked in an enqueue)."""

        def __init__(self, source, capacity):
            self.source, self.capacity = source, capacity

        def _setup_graph(self):
            self.size = self.source.queue.size()

        def _trigger_epoch(self):
            if self.epoch_num == self.trainer.max_epoch:
                while self.trainer.sess.run(self.size) < self.capacity:
                    time.sleep(0.01)
                print('QUEUE FULL', flush=True)


    df = DataFromList([[np.full((3, 2), k, np.float32)] for k in range(4)], shuffle=False)
    source = QueueInput(df)
    launch_train_with_config(TrainConfig(model=PointMean(), data=source, steps_per_epoch=4, max_epoch=2,
                                         callbacks=[FullQueueAtTheEnd(source, 50)]),
                             SimpleTrainer())
    print('TRAINING DONE, thread alive:', source.thread.is_alive(), flush=True)
''')


def test_queue_input_run_ends_without_a_cancelled_enqueue():
    env = subprocess_env(TF_CPP_MIN_LOG_LEVEL='0')
    result = subprocess.run([sys.executable, '-c', SCRIPT], env=env, capture_output=True, text=True,
                            timeout=240, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert 'QUEUE FULL' in result.stdout
    assert 'TRAINING DONE, thread alive: False' in result.stdout
    for line in ('CANCELLED', 'Enqueue operation was cancelled', 'Local rendezvous is aborting'):
        assert line not in result.stderr, result.stderr
