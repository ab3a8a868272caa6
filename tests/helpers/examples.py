"""Running the bundled examples: imported without their main part, or their ``__main__`` run in
this process, and what they print and write read back."""

import json
import os
import re
import runpy
import sys

from helpers.paths import REPO_DIR, import_file


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
