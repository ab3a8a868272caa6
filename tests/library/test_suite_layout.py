"""The test suite is a map of the package (tests/README.md): a module's tests are found by its path.

Every test file is ``tests/<package>/test_<module>[_<aspect>].py`` for a package of tensorpack_lite
and one of its modules (or the package itself), or sits in one of the named folders for what
crosses packages; no file is named for the history of the work; every package has its folder; no
file imports a test module (what several share is in tests/helpers/)."""

import ast
import os
import re

import pytest

from helpers.paths import REPO_DIR, TESTS_DIR

pytestmark = pytest.mark.quick

PACKAGE_DIR = os.path.join(REPO_DIR, 'tensorpack_lite')
HELPERS_DIR = os.path.join(TESTS_DIR, 'helpers')

NAMED_FOLDERS = {
    'library': 'the package as a whole: its public names, its layers, its warnings; the suite: this layout, '
               'the process guard, the order of a run',
    'programs': "tensorpack's programs, the examples, CI's scripts",
    'docs': 'the guides run as written, the site, the documented numbers',
    'distributed': 'real multi-process jobs (several workers, MPI ranks, Slurm, network isolation)',
}
"""Folders for what crosses packages, and what goes in each."""

NAMED_FOR_A_CLASS = {
    'callbacks/test_estimated_time_left.py': 'misc',     # EstimatedTimeLeft, in callbacks/misc.py
}
"""Test files named for the class they test rather than its module (module given)."""

HISTORY_WORDS = ('extra', 'misc', 'review', 'regression', 'silent', 'more', 'other', 'fixes', 'new')
"""Words that name when or why a test was written rather than what it tests."""


def packages():
    return sorted(name for name in os.listdir(PACKAGE_DIR)
                  if os.path.isfile(os.path.join(PACKAGE_DIR, name, '__init__.py')))


def modules(package):
    """The modules and subpackages of ``package`` (names without .py)."""
    root = os.path.join(PACKAGE_DIR, package)
    return {name[:-3] if name.endswith('.py') else name for name in os.listdir(root)
            if (name.endswith('.py') and name != '__init__.py')
            or os.path.isfile(os.path.join(root, name, '__init__.py'))}


def suite_files():
    """Every test_*.py under tests/, relative to tests/."""
    found = []
    for directory, dirs, files in os.walk(TESTS_DIR):
        dirs[:] = [d for d in dirs if d != '__pycache__']
        found += [os.path.relpath(os.path.join(directory, f), TESTS_DIR) for f in files
                  if f.startswith('test_') and f.endswith('.py')]
    return sorted(found)


def test_every_test_file_is_under_a_package_folder_or_a_named_one():
    folders = set(packages()) | set(NAMED_FOLDERS)
    misplaced = []
    for path in suite_files():
        parts = path.split(os.sep)
        if len(parts) != 2 or parts[0] not in folders:
            misplaced.append(path)
    assert misplaced == [], "test files outside tests/<package>/ and the named folders {}: {}".format(
        sorted(NAMED_FOLDERS), misplaced)


def test_a_package_folders_files_are_named_for_its_modules():
    """tests/<package>/test_<name>.py: <name> starts with a module (or subpackage) of the package,
    or the package's own name (its __init__: exports, package-wide properties)."""
    wrong = []
    for path in suite_files():
        parts = path.split(os.sep)
        if len(parts) != 2 or parts[0] in NAMED_FOLDERS or path in NAMED_FOR_A_CLASS:
            continue
        package, name = parts[0], parts[1][len('test_'):-len('.py')]
        heads = modules(package) | {package}
        if not any(name == head or name.startswith(head + '_') for head in heads):
            wrong.append(path)
    for path, module in NAMED_FOR_A_CLASS.items():
        assert module in modules(path.split('/')[0]), path
    assert wrong == [], "named for no module of their package: {}".format(wrong)


def test_no_test_file_is_named_for_the_history_of_the_work():
    words = re.compile(r'(^|_)({})s?(_|$)'.format('|'.join(HISTORY_WORDS)))
    named = [p for p in suite_files() if words.search(os.path.basename(p)[len('test_'):-len('.py')])]
    assert named == []


@pytest.mark.parametrize('package', packages())
def test_every_package_has_its_folder_of_tests(package):
    folder = os.path.join(TESTS_DIR, package)
    assert [f for f in os.listdir(folder) if f.startswith('test_')], package


def test_every_folder_is_a_package_of_the_suite():
    """Test files of the same name in two folders (train/test_base.py, dataflow/test_base.py)
    need each folder to be a package: pytest imports them as tests.<folder>.test_<name>."""
    for path in suite_files():
        folder = os.path.join(TESTS_DIR, os.path.dirname(path))
        assert os.path.isfile(os.path.join(folder, '__init__.py')), folder


def test_the_readme_of_the_suite_names_every_folder():
    with open(os.path.join(TESTS_DIR, 'README.md'), encoding='utf-8') as f:
        text = f.read()
    for folder in packages() + sorted(NAMED_FOLDERS):
        assert '`{}/`'.format(folder) in text, folder


def imported_names(source):
    """The dotted names the Python ``source`` imports: ``import a.b`` gives 'a.b', ``from a import
    b`` 'a.b' (b may be a module), a relative import keeps its dots ('.b', '..a.b'); also a literal
    name given to ``importlib.import_module`` or ``__import__``, and the imports of the programs in
    string literals (a child's ``python -c`` code), statement by statement."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = '.' * node.level + (node.module or '')
            names += [base + ('' if base.endswith('.') else '.') + alias.name for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) and \
                getattr(node.func, 'attr', getattr(node.func, 'id', None)) in ('import_module', '__import__'):
            names.append(str(node.args[0].value))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and 'import' in node.value:
            for statement in re.split(r'[;\n]', node.value):
                try:
                    names += imported_names(statement.strip())
                except SyntaxError:     # not Python, or a template ('{!r}')
                    pass
    return names


def imported_test_modules(source):
    """What ``source`` imports that is (or is inside) a test module: a part starts with test_."""
    return [name for name in imported_names(source)
            if any(part.startswith('test_') for part in name.split('.'))]


SPELLINGS = {
    'from-module': 'from tests.distributed.TEST_trainers import Run',
    'import-as': 'import tests.distributed.TEST_mpi as mpi_tests',
    'from-package': 'from tests.distributed import TEST_mpi',
    'top-level': 'import TEST_writer',
    'from-top-level': 'from TEST_writer import STEPS',
    'relative-module': 'from .TEST_writer import train',
    'relative-package': 'from . import TEST_writer',
    'relative-parent': 'from ..checkpoint import TEST_writer',
    'import_module': "importlib.import_module('tests.library.TEST_api')",
    'child-program': 'code = "import sys; sys.path[:0] = [{!r}]; from tests.dataflow import TEST_state as t"',
}
"""Ways to import a test module, 'TEST_' standing for 'test_' (so that this file imports none)."""


@pytest.mark.parametrize('source', list(SPELLINGS.values()), ids=list(SPELLINGS))
def test_every_spelling_of_importing_a_test_module_is_seen(source):
    assert imported_test_modules(source.replace('TEST_', 'test_'))
    assert imported_test_modules(source) == []


def test_imports_of_other_modules_are_not_taken_for_test_modules():
    source = ('import pytest\nfrom helpers.distributed import Run\nfrom tensorpack_lite.dataflow import '
              'TestDataSpeed\ncode = "import numpy; from helpers import testing"\n')
    assert imported_test_modules(source) == []


def test_no_file_imports_a_test_module():
    """A test module imports no other (nor a child program it runs): what several test files
    share is defined once in tests/helpers/, which, like conftest.py, is not checked."""
    found = []
    for directory, dirs, files in os.walk(TESTS_DIR):
        dirs[:] = [d for d in dirs if d != '__pycache__' and os.path.join(directory, d) != HELPERS_DIR]
        for name in files:
            if name.endswith('.py') and name != 'conftest.py':
                path = os.path.join(directory, name)
                with open(path, encoding='utf-8') as f:
                    found += ['{}: {}'.format(os.path.relpath(path, TESTS_DIR), imported)
                              for imported in imported_test_modules(f.read())]
    assert found == [], "test modules imported (move what they share to tests/helpers/): {}".format(found)


def test_the_helpers_package_is_an_index_of_its_modules():
    """helpers/__init__.py defines and imports nothing (a name is imported from its module); its
    docstring and tests/README.md name every module of helpers/."""
    with open(os.path.join(HELPERS_DIR, '__init__.py'), encoding='utf-8') as f:
        tree = ast.parse(f.read())
    assert [type(node).__name__ for node in tree.body] == ['Expr'], 'helpers/__init__.py is a docstring only'
    index = ast.get_docstring(tree)
    with open(os.path.join(TESTS_DIR, 'README.md'), encoding='utf-8') as f:
        readme = f.read()
    modules = sorted(name[:-3] for name in os.listdir(HELPERS_DIR)
                     if name.endswith('.py') and name != '__init__.py')
    assert [m for m in modules if ':mod:`helpers.{}`'.format(m) not in index] == []
    assert [m for m in modules if '`helpers.{}`'.format(m) not in readme] == []
