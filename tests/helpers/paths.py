"""Where things are: the tests/ directory and the repository's root."""

import importlib.util
import os
import sys

__all__ = ['TESTS_DIR', 'REPO_DIR', 'import_file']

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The tests/ directory (its *_scripts/ folders hold the programs the tests start)."""
REPO_DIR = os.path.dirname(TESTS_DIR)
"""The repository's root."""


def import_file(path, name):
    """The module of the Python file ``path``, imported as ``name`` (and kept in ``sys.modules``
    under it) without running its ``__main__`` part. Its folder is on ``sys.path`` while it is
    imported (for what it imports from beside it), and only then: the process guard counts a
    lasting change of ``sys.path`` as a leak."""
    folder = os.path.dirname(os.path.abspath(path))
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    finally:
        sys.path.remove(folder)
    return module
