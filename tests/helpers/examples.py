"""Running the bundled examples: imported without their main part, or their ``__main__`` run in
this process, and what they print and write read back; the README's "Using it" snippet and its
model."""

import json
import os
import re
import runpy
import sys

from helpers.paths import REPO_DIR, import_file


def readme_snippet():
    """The README's "Using it" snippet (the one block defining ``class Model`` and training it)."""
    with open(os.path.join(REPO_DIR, 'README.md'), encoding='utf-8') as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    snippets = [b for b in blocks if 'launch_train_with_config' in b and 'class Model' in b]
    assert len(snippets) == 1
    return snippets[0]


def readme_model():
    """The class ``Model`` of the README's snippet (its code up to where it sets the logger
    directory, run here: the imports and the class)."""
    code = readme_snippet().split('logger.set_logger_dir')[0]
    namespace = {}
    exec(compile(code, 'README.md', 'exec'), namespace)
    return namespace['Model']


def load_example(relpath):
    """The module of the example script ``relpath`` (from the repository's root, e.g.
    ``'examples/basics/mnist-convnet.py'``), imported without running its main part."""
    name = 'example_' + os.path.basename(relpath).replace('-', '_')[:-3]
    return import_file(os.path.join(REPO_DIR, relpath), name)


def run_in_process(path, args, monkeypatch):
    """Run an example's ``__main__`` in this process (TensorFlow is imported already), for
    what ends before training: ``--help`` and bad command lines or data."""
    monkeypatch.setattr(sys, 'argv', [path] + list(args))
    monkeypatch.syspath_prepend(os.path.join(REPO_DIR, os.path.dirname(path)))   # e.g. GAN.py beside DCGAN.py
    runpy.run_path(os.path.join(REPO_DIR, path), run_name='__main__')


def read_stats(logdir):
    return json.loads((logdir / 'stats.json').read_text())


def final_number(text, label):
    """The number logged after ``label`` (e.g. 'Final validation accuracy: 0.9731')."""
    found = re.findall(re.escape(label) + r'[^:]*: ([0-9.]+)', text)
    assert found, "'{}' not in the output:\n{}".format(label, text[-3000:])
    return float(found[-1])
