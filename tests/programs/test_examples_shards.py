"""examples/basics/digits-shards.py: the digits written as shards to a bucket (a real S3 server),
trained from there, and resumed."""

import json
import os
import sys

import pytest

from helpers.examples import final_number
from helpers.paths import REPO_DIR
from helpers.processes import run_bounded, subprocess_env
from helpers.s3 import S3Server

SCRIPT = os.path.join(REPO_DIR, 'examples', 'basics', 'digits-shards.py')


@pytest.fixture(scope='module')
def s3(tmp_path_factory):
    pytest.importorskip('s3fs')
    pytest.importorskip('moto')
    server = S3Server(str(tmp_path_factory.mktemp('s3-server')))
    yield server
    server.stop()


def run(s3, tmp_path, *args):
    code, output = run_bounded([sys.executable, SCRIPT, '--data', 's3://bucket/digits', '--logdir',
                                str(tmp_path / 'log')] + list(args), 300, env=subprocess_env(**s3.env),
                               cwd=tmp_path)
    assert code == 0, output[-5000:]
    return output


def test_writes_the_digits_to_a_bucket_trains_from_them_and_resumes(s3, tmp_path):
    output = run(s3, tmp_path, '--max-epoch', '2', '--cache-dir', str(tmp_path / 'cache'))
    index = json.loads(s3.objects('digits')['index.json'])
    assert index['total'] == 1500 and len(index['shards']) == len(s3.objects('digits')) - 1 > 4
    assert "1500 digits in {} shards at s3://bucket/digits".format(len(index['shards'])) in output
    stats = json.loads((tmp_path / 'log' / 'stats.json').read_text())
    assert [s['epoch_num'] for s in stats] == [1, 2] and stats[-1]['global_step'] == 2 * 46
    assert final_number(output, 'Final validation accuracy') > 0.5
    assert os.listdir(str(tmp_path / 'cache')) == []

    output = run(s3, tmp_path, '--max-epoch', '3', '--resume')
    assert 'save_shards' not in output      # written once
    assert 'Resuming from checkpoint {} (end of epoch 2)'.format(tmp_path / 'log' / 'model-92') in output
    stats = json.loads((tmp_path / 'log' / 'stats.json').read_text())
    assert [s['epoch_num'] for s in stats] == [1, 2, 3] and stats[-1]['global_step'] == 3 * 46
