"""The README's "Using it" snippet runs as written and trains."""

import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme_snippet():
    readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    blocks = re.findall(r'```python\n(.*?)```', readme, re.S)
    snippets = [b for b in blocks if 'launch_train_with_config' in b and 'class Model' in b]
    assert len(snippets) == 1
    return snippets[0]


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
