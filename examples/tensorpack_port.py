"""Helpers of the drivers that run one of tensorpack's own examples on tensorpack_lite
(``FasterRCNN_tensorpack/run.py``, ``HED_tensorpack/run.py``): copy the example out of the
user's tensorpack checkout, rename its imports, apply a list of documented text changes (each
must match exactly once, or the run stops naming it), and run its scripts with this
repository on ``PYTHONPATH`` on a CPU. Nothing of tensorpack is shipped here."""

import argparse
import glob
import os
import re
import shutil
import subprocess

__all__ = ['driver_arguments', 'port', 'library_env', 'run']

IMPORT = re.compile(r'^(\s*(?:from|import)\s+)tensorpack\b', re.M)
TF_IMPORT = '\nimport tensorflow as tf\n'
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _edit(path, edit):
    with open(path) as f:
        text = f.read()
    new = edit(text)
    if new != text:
        with open(path, 'w') as f:
            f.write(new)
    return new != text


def port(src, dst, changes, tf1_modules=()):
    """Copy the example from ``src`` to ``dst`` (which must not exist), rename ``tensorpack``
    to ``tensorpack_lite`` in the imports of every .py, make the files matching the glob
    patterns ``tf1_modules`` import ``tensorflow.compat.v1 as tf``, and apply ``changes``:
    ``(file, old text, new text, why)``, each ``old`` occurring exactly once in its file.
    Returns the list of changes made, one line each (for the log)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns('*.pyc', '__pycache__', 'train_log'))
    for path in glob.glob(os.path.join(dst, '**', '*.py'), recursive=True):
        _edit(path, lambda text: IMPORT.sub(r'\1tensorpack_lite', text))
    made = ['imports: tensorpack -> tensorpack_lite in every .py']
    tf1_files = sorted({p for pattern in tf1_modules for p in glob.glob(os.path.join(dst, pattern))})
    for path in tf1_files:
        if _edit(path, lambda text: text.replace(TF_IMPORT, '\nimport tensorflow.compat.v1 as tf\n')):
            made.append('{}: import tensorflow.compat.v1 as tf (TF1 names on TF 2)'.format(
                os.path.relpath(path, dst)))
    for name, old, new, why in changes:
        path = os.path.join(dst, name)
        with open(path) as f:
            count = f.read().count(old)
        if count != 1:
            raise SystemExit("the change to {} ({}) does not apply: {!r} occurs {} times in it".format(
                name, why, old, count))
        _edit(path, lambda text: text.replace(old, new))
        made.append('{}: {}'.format(name, why))
    return made


def driver_arguments(doc, example, steps_per_epoch):
    """The argument parser every driver starts from: ``--tensorpack-examples`` (the path of
    tensorpack's ``examples/<example>``), ``--workdir``, ``--steps-per-epoch``, ``--timeout``."""
    parser = argparse.ArgumentParser(description=doc.split('\n\n')[0])
    parser.add_argument('--tensorpack-examples', required=True,
                        help="path of tensorpack's examples/{} (a checkout)".format(example))
    parser.add_argument('--workdir', help='where to copy the example and write data and logs '
                                          '(default: a new temporary directory)')
    parser.add_argument('--steps-per-epoch', type=int, default=steps_per_epoch)
    parser.add_argument('--timeout', type=int, default=1800, help='seconds for each run of a script')
    return parser


def library_env(**extra):
    """The environment of the example's processes: this repository first on ``PYTHONPATH``, no
    GPU, TensorFlow's C++ logs quieter, plus ``extra``."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get('PYTHONPATH', '')]),
                CUDA_VISIBLE_DEVICES='', TF_CPP_MIN_LOG_LEVEL='2', **extra)


def run(cmd, cwd, env, timeout):
    """Run ``cmd`` in ``cwd``, echoing it first; a failure or the timeout raises."""
    print('+ (cd {}) {}'.format(cwd, ' '.join(cmd)), flush=True)
    subprocess.run(cmd, cwd=cwd, env=env, timeout=timeout, check=True)
