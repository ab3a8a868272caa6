"""The README's "Using it" snippet runs as written and trains; its Layout table names every
package of tensorpack_lite."""

import json
import os
import re
import subprocess
import sys

import pytest
from helpers.examples import readme_snippet
from helpers.paths import REPO_DIR

REPO = REPO_DIR


@pytest.mark.quick
def test_readme_snippet_runs_as_written(tmp_path):
    script = tmp_path / 'snippet.py'
    script.write_text(readme_snippet())
    out = subprocess.run([sys.executable, str(script)], cwd=str(tmp_path), capture_output=True, text=True,
                         timeout=540)
    assert out.returncode == 0, out.stderr[-3000:]
    logdir = tmp_path / 'train_log' / 'my-run'
    with open(logdir / 'stats.json') as f:
        stats = json.load(f)
    assert [s['epoch_num'] for s in stats] == list(range(1, 21))
    assert stats[-1]['validation_accuracy'] > 0.8, stats[-1]   # measured 0.92-0.93
    assert stats[-1]['learning_rate'] == 0.01 and stats[0]['learning_rate'] == 0.1
    assert (logdir / 'checkpoint').exists()


def layout_table():
    """The directories the rows of the README's Layout table name (``tensorpack_lite/<name>/``)."""
    readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    section = re.search(r'^## Layout\n(.*?)(?=^## |\Z)', readme, re.M | re.S)
    assert section, "README.md has no '## Layout' section"
    return re.findall(r'^\| `tensorpack_lite/(\w+)/` \|', section.group(1), re.M)


def test_the_layout_table_names_every_package():
    root = os.path.join(REPO, 'tensorpack_lite')
    packages = {name for name in os.listdir(root) if os.path.isfile(os.path.join(root, name, '__init__.py'))}
    rows = layout_table()
    assert len(rows) == len(set(rows)), rows
    assert sorted(rows) == sorted(packages)
    assert {'cluster', 'loop', 'contrib', 'checkpoint'} <= packages
