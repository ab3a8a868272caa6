"""How long a program that leaves its parallel DataFlows open takes to exit.

For each process-based parallel DataFlow and each number of workers, a fresh Python process
starts the DataFlow, takes ``--datapoints`` datapoints and returns from its last line without
closing it. Printed: the wall time of the whole process, and the time from its last line to
its end (the exit itself: the workers stopped, the ipc directory removed). Also checked: no
worker alive and no ipc directory left afterwards.

Run: python benchmarks/dataflow_exit.py [--workers 6 8 20 --datapoints 20]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r'''
import json, os, sys, tempfile, time
import psutil
sys.path.insert(0, {root!r})
tempfile.tempdir = {tmpdir!r}
from tensorpack_lite.dataflow import (DataFromList, MultiProcessMapAndBatchData, MultiProcessMapData,
                                      MultiProcessRunner, MultiProcessRunnerZMQ)
kind, n, count = {kind!r}, {workers}, {count}
source = DataFromList([[k] for k in range(1000)], shuffle=False)
if kind == 'MultiProcessRunnerZMQ':
    df = MultiProcessRunnerZMQ(source, num_proc=n)
elif kind == 'MultiProcessRunner':
    df = MultiProcessRunner(source, num_prefetch=10, num_proc=n)
elif kind == 'MultiProcessMapData':
    df = MultiProcessMapData(source, num_proc=n, map_func=lambda dp: dp, buffer_size=40)
else:
    df = MultiProcessMapAndBatchData(source, num_proc=n, map_func=lambda dp: dp, batch_size=2)
df.reset_state()
itr = iter(df)
for _ in range(count):
    next(itr)
workers = [p.pid for p in psutil.Process().children()]
print(json.dumps({{'workers': workers, 'last_line': time.time()}}), flush=True)
'''

KINDS = ['MultiProcessRunnerZMQ', 'MultiProcessRunner', 'MultiProcessMapData', 'MultiProcessMapAndBatchData']


def alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_once(kind, workers, count, timeout=600):
    """(wall seconds, seconds from the last line to the end, leftovers) of one program."""
    with tempfile.TemporaryDirectory(prefix='tpx-', dir='/tmp') as tmpdir:
        program = PROGRAM.format(root=ROOT, tmpdir=tmpdir, kind=kind, workers=workers, count=count)
        start = time.time()
        proc = subprocess.run([sys.executable, '-c', program], capture_output=True, text=True,
                              timeout=timeout)
        end = time.time()
        if proc.returncode != 0:
            raise RuntimeError("{} x {} exited with {}:\n{}".format(
                kind, workers, proc.returncode, proc.stderr))
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        time.sleep(0.5)
        left = [p for p in report['workers'] if alive(p)] + os.listdir(tmpdir)
        return end - start, end - report['last_line'], left


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--workers', type=int, nargs='+', default=[6, 8, 20])
    parser.add_argument('--datapoints', type=int, default=20)
    parser.add_argument('--kinds', nargs='+', default=KINDS, choices=KINDS)
    args = parser.parse_args()
    print("load average {}".format(', '.join('{:.2f}'.format(x) for x in os.getloadavg())))
    print("{:<30}{:>8}{:>12}{:>14}  {}".format('class', 'workers', 'wall s', 'exit s', 'left behind'))
    for kind in args.kinds:
        for workers in args.workers:
            wall, exit_s, left = run_once(kind, workers, args.datapoints)
            print("{:<30}{:>8}{:>12.2f}{:>14.2f}  {}".format(kind, workers, wall, exit_s, left or 'nothing'),
                  flush=True)
    print("load average {}".format(', '.join('{:.2f}'.format(x) for x in os.getloadavg())))


if __name__ == '__main__':
    main()
