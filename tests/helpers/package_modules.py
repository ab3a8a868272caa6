"""The modules of tensorpack_lite as files, and what their imports name: for the tests that read
the package's source (its layers, its private names) without importing it."""

import ast
import os

from helpers.paths import REPO_DIR

__all__ = ['PACKAGE', 'module_files', 'parse_module', 'import_source']

PACKAGE = 'tensorpack_lite'


def module_files():
    """{module name: path} of every module of the package (a package by its ``__init__.py``)."""
    modules = {}
    root = os.path.join(REPO_DIR, PACKAGE)
    for directory, _, files in os.walk(root):
        for fname in files:
            if fname.endswith('.py'):
                path = os.path.join(directory, fname)
                parts = os.path.relpath(path, REPO_DIR)[:-3].split(os.sep)
                if parts[-1] == '__init__':
                    parts = parts[:-1]
                modules['.'.join(parts)] = path
    return modules


def parse_module(path):
    """The syntax tree of the file ``path``."""
    with open(path, encoding='utf-8') as f:
        return ast.parse(f.read(), path)


def import_source(name, path, node):
    """The absolute name of the module that ``node`` (an ``ast.ImportFrom`` in the module ``name``,
    file ``path``) imports from, relative imports resolved."""
    if not node.level:
        return node.module or ''
    base = name.split('.') if path.endswith('__init__.py') else name.split('.')[:-1]
    base = base[:len(base) - node.level + 1]
    return '.'.join(base + ([node.module] if node.module else []))
