"""docs/reproducibility.md's code, run as written (tests/helpers/guide_blocks.py): two runs with one seed
(shuffled data, random initial weights, dropout, op determinism) end bit-identical, another seed
does not; a strict parallel map keeps its input's order."""

import os

from helpers.guide_blocks import run_guide
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR


def test_two_runs_with_one_seed_are_bit_identical_as_the_guide_says(tmp_path):
    env = subprocess_env()
    output = run_guide(os.path.join(REPO, 'docs', 'reproducibility.md'), str(tmp_path), timeout=600, env=env)
    assert 'seed 1 twice, bit-identical: True' in output, output[-3000:]
    assert 'seed 2, different: True' in output
    assert 'strict order kept: True' in output
