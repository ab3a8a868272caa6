"""Training from shards in a bucket: tests/resume_scripts/digits_resume.py (QueueInput, 3 epochs
of 30 steps of 8 digits, AutoResumeTrainConfig) over a ShardedData of the digits in the S3 server,
SIGKILLed at step 47 and run again on a new empty cache: it resumes at step 40 (its last
checkpoint) with the data where it was, and ends with the weights of an uninterrupted run."""

import collections
import os
import signal
import sys

import numpy as np

from helpers.paths import TESTS_DIR, import_file
from helpers.processes import run_bounded, subprocess_env
from tensorpack_lite.dataflow import DataFromList, save_shards
from tensorpack_lite.tfutils.varmanip import load_chkpt_vars

SCRIPT = os.path.join(TESTS_DIR, 'resume_scripts', 'digits_resume.py')
ARGS = ['--input', 'queue', '--shards', 's3://bucket/digits', '--save-every', '10', '--sync-save']


def train(s3, logdir, *args, expect=0):
    env = subprocess_env(PYTHONHASHSEED='0', TMPDIR=str(logdir), **s3.env)    # the cache: a new directory
    code, output = run_bounded([sys.executable, SCRIPT, str(logdir)] + ARGS + list(args), 240, env=env)
    assert code == expect, "exit {} (expected {}):\n{}".format(code, expect, output[-5000:])
    return output


def final_weights(logdir):
    values = load_chkpt_vars(os.path.join(str(logdir), 'model-90'))
    return {name: value for name, value in values.items() if 'queue_size' not in name}


def test_killed_mid_epoch_resumes_at_the_step_and_ends_as_never_stopped(s3, tmp_path):
    script = import_file(SCRIPT, 'digits_resume_for_shards')
    save_shards(DataFromList(script.datapoints(), shuffle=False), 's3://bucket/digits', shard_bytes=2000)
    (tmp_path / 'whole').mkdir()
    train(s3, tmp_path / 'whole')
    (tmp_path / 'killed').mkdir()
    train(s3, tmp_path / 'killed', '--sigkill-at', '47', expect=-signal.SIGKILL)
    output = train(s3, tmp_path / 'killed')
    assert "(step 10 of 30 of epoch 2, global step 40)" in output
    with open(str(tmp_path / 'killed' / 'steps.txt')) as f:
        twice = sorted(step for step, n in collections.Counter(int(line) for line in f).items() if n > 1)
    assert twice == list(range(41, 48))
    whole, resumed = final_weights(tmp_path / 'whole'), final_weights(tmp_path / 'killed')
    assert sorted(whole) == sorted(resumed)
    difference = max(float(np.max(np.abs(whole[k] - resumed[k]))) for k in whole)
    print("shards in S3, SIGKILL at step 47: max |w - uninterrupted| = {:.3g}".format(difference))
    assert difference <= 1e-6
