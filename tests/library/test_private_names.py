"""No module of the package uses a private name (a leading underscore) of another: what a sibling
needs is public in its home. Read from the source: ``from x import _y``, and ``x._y`` where ``x`` is
an imported module of the package, anywhere in a file. A module's own names and dunder names
(``__version__``) are fine; private names of other libraries are not the package's to make public."""

import ast

import pytest
from helpers.package_modules import PACKAGE, import_source, module_files, parse_module

pytestmark = pytest.mark.quick

PENDING = set()
"""Uses of a private name allowed until the branch that makes it public is merged (none now: the
multi-process trainers' shared pieces are public, issue 68)."""


def is_private(name):
    return name.startswith('_') and not (name.startswith('__') and name.endswith('__'))


def private_uses(name, path, modules):
    """The private names of other modules of the package that the module ``name`` uses, as
    '<module>: <home module>.<private name>' strings."""
    tree = parse_module(path)
    found = set()
    imported_modules = {}   # local name -> module of the package it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            source = import_source(name, path, node)
            if source.split('.')[0] != PACKAGE:
                continue
            for alias in node.names:
                if source + '.' + alias.name in modules:
                    imported_modules[alias.asname or alias.name] = source + '.' + alias.name
                elif is_private(alias.name) and source != name:
                    found.add('{}: {}.{}'.format(name, source, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split('.')[0] == PACKAGE:
                    imported_modules[alias.asname or PACKAGE] = alias.name if alias.asname else PACKAGE
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            value = node
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if not isinstance(value, ast.Name) or value.id not in imported_modules:
                continue
            module = imported_modules[value.id]
            for part in chain:   # down the submodules, to the first name that is not one
                if module + '.' + part in modules:
                    module += '.' + part
                    continue
                if is_private(part) and module != name:
                    found.add('{}: {}.{}'.format(name, module, part))
                break
    return found


@pytest.fixture(scope='module')
def uses():
    modules = module_files()
    return {use for name, path in modules.items() for use in private_uses(name, path, modules)}


def test_no_module_uses_a_private_name_of_another(uses):
    leaks = sorted(uses - PENDING)
    assert leaks == [], "private names used by other modules (make them public in their home):\n{}".format(
        '\n'.join(leaks))


def test_what_is_pending_is_still_there(uses):
    """An entry of PENDING that was made public is removed from it."""
    assert sorted(PENDING - uses) == []


def test_the_checker_sees_private_imports_and_attributes(tmp_path):
    source = tmp_path / 'mod.py'
    source.write_text(
        "import numpy as np\n"
        "import tensorpack_lite.utils.utils\n"
        "from numpy import _NoValue\n"                       # not the package's
        "from ..utils import utils as rng\n"
        "from . import base\n"
        "from .base import _Hidden, Public, __version__\n"
        "from .mod import _mine\n"                            # its own
        "def f():\n"
        "    from ..utils.logger import _detach as d\n"       # inside a function too
        "    return (rng._RNG_SEED, base._private(), base.public, rng.__name__, np._x, d,\n"
        "            tensorpack_lite.utils.utils._CALL_SITES_SEEN)\n")
    modules = {PACKAGE + '.dataflow.mod': str(source), PACKAGE + '.dataflow.base': 'base.py',
               PACKAGE + '.utils.utils': 'utils.py', PACKAGE + '.utils.logger': 'logger.py',
               PACKAGE + '.dataflow': '__init__.py', PACKAGE + '.utils': '__init__.py',
               PACKAGE: '__init__.py'}
    found = private_uses(PACKAGE + '.dataflow.mod', str(source), modules)
    assert sorted(use.split(': ')[1] for use in found) == [
        'tensorpack_lite.dataflow.base._Hidden', 'tensorpack_lite.dataflow.base._private',
        'tensorpack_lite.utils.logger._detach', 'tensorpack_lite.utils.utils._CALL_SITES_SEEN',
        'tensorpack_lite.utils.utils._RNG_SEED']
