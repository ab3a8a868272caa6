"""docs/faq.md's code, run as written (tests/helpers/guide_blocks.py): a NaN stopped at its step with the
variable named, tensors printed and dumped, a frozen layer that does not change while the others
do, clipped and scaled gradients, traced steps."""

import os
import re

from helpers.guide_blocks import run_guide
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR


def test_the_faq_code_runs_and_each_answer_does_what_it_says(tmp_path):
    env = subprocess_env()
    output = run_guide(os.path.join(REPO, 'docs', 'faq.md'), str(tmp_path), timeout=600, env=env)
    assert re.search(r"stopped: CheckNumerics\['hidden/\w+'\] : Tensor had (NaN|Inf) values", output), \
        output[-3000:]
    costs = re.search(r"costs of the first steps: \['([0-9.]+)', '([0-9.]+)', '([0-9.]+)'\]", output)
    assert costs and all(float(c) > 0 for c in costs.groups()), output[-3000:]
    assert "dumped: ['hidden/W', 'prediction']" in output
    assert 'hidden/W changed: False | out/W changed: True' in output
    assert 'trained with clipped gradients' in output
    traces = re.search(r"traces: \[(.*)\]", output).group(1)
    assert traces == "'chrome-trace-4.json', 'chrome-trace-5.json'", traces   # named after the step run
