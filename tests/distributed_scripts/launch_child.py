"""A process for the launcher tests (no TensorFlow): records its TF_CONFIG in
``OUT/<job><index>.json``, prints a line naming its task, then does what it is told:

    python launch_child.py OUT [--fail JOB:INDEX:CODE [--once]] [--fail-here CODE] [--wait]

Every start is a line of ``OUT/starts.txt``. ``--fail`` makes that task exit with CODE once every
task of the cluster has started (so that each has its SIGTERM handler, however slow its start);
with ``--once`` only if it has not failed before (marker ``OUT/failed-once``). ``--fail-here``
makes this task do so whatever its index (a launcher test adds it to one host's command). ``--wait`` makes
every other task wait (up to 600 s) until a SIGTERM, which it records in
``OUT/<job><index>.sigterm`` before exiting with code 0.
"""

import json
import os
import signal
import sys
import time


def wait_for_every_task(out, cluster, timeout=600):
    """Wait until every task of ``cluster`` has written its ``OUT/<job><index>.json``."""
    names = ['{}{}'.format(job, i) for job, addresses in cluster.items() for i in range(len(addresses))]
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(os.path.join(out, name + '.json')) for name in names):
        if time.monotonic() > deadline:
            sys.exit('launch_child: not every task started within {} s'.format(timeout))
        time.sleep(0.02)


def main(argv):
    out = argv[0]
    config = json.loads(os.environ['TF_CONFIG'])
    job, index = config['task']['type'], config['task']['index']
    name = '{}{}'.format(job, index)

    def on_sigterm(signum, frame):
        with open(os.path.join(out, name + '.sigterm'), 'w') as f:
            f.write(str(signum))
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    with open(os.path.join(out, name + '.json'), 'w') as f:
        json.dump({'tf_config': config, 'pid': os.getpid()}, f)
    print('task {} {} of {} workers'.format(job, index, len(config['cluster']['worker'])), flush=True)
    with open(os.path.join(out, 'starts.txt'), 'a') as f:
        f.write(name + '\n')
    if '--fail-here' in argv:
        wait_for_every_task(out, config['cluster'])
        sys.exit(int(argv[argv.index('--fail-here') + 1]))
    if '--fail' in argv:
        fail_job, fail_index, code = argv[argv.index('--fail') + 1].split(':')
        once = os.path.join(out, 'failed-once')
        if (fail_job, int(fail_index)) == (job, index) and not ('--once' in argv and os.path.exists(once)):
            open(once, 'w').close()
            wait_for_every_task(out, config['cluster'])
            sys.exit(int(code))
    if '--wait' in argv:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            time.sleep(0.05)
        sys.exit(5)


if __name__ == '__main__':
    main(sys.argv[1:])
