"""utils: execute_only_once, the file helpers and download (file:// and a local HTTP server),
change_gpu, logger.addFilter, OnlineMoments, IterSpeedCounter, intensity_to_rgb,
dump_dataflow_images, PALETTE_RGB, enable_call_trace, NVMLContext (a missing library and a
fake one built with gcc), loadcaffe (a fake pycaffe and a fake protoc), and that no utils
module imports TensorFlow at import time."""

import ast
import os
import textwrap

import tensorpack_lite.utils


class _ImportTimeImports(ast.NodeVisitor):
    """Collects the modules imported by code that runs at import time (not inside functions)."""

    def __init__(self):
        self.modules = []

    def visit_FunctionDef(self, node):
        pass

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_Import(self, node):
        self.modules += [alias.name for alias in node.names]

    def visit_ImportFrom(self, node):
        self.modules.append('.' * node.level + (node.module or ''))


def _import_time_imports(source):
    visitor = _ImportTimeImports()
    visitor.visit(ast.parse(source))
    return visitor.modules


def _imports_tensorflow(module):
    return module.split('.')[0] == 'tensorflow' or module.lstrip('.') == 'compat' or module.startswith('..')


def test_the_import_checker():
    sample = textwrap.dedent("""
        import os
        from ..compat import tfv1
        try:
            import tensorflow as tf
        except ImportError:
            pass
        class A:
            from .logger import info
        def f():
            import tensorflow
    """)
    assert _import_time_imports(sample) == ['os', '..compat', 'tensorflow', '.logger']
    assert [_imports_tensorflow(m) for m in _import_time_imports(sample)] == [False, True, True, False]


def test_utils_modules_do_not_import_tensorflow_at_import_time():
    utils_dir = os.path.dirname(tensorpack_lite.utils.__file__)
    files = sorted(f for f in os.listdir(utils_dir) if f.endswith('.py'))
    assert {'fs.py', 'viz.py', 'nvml.py', 'loadcaffe.py', 'palette.py', 'debug.py'} <= set(files)
    offenders = {}
    for name in files:
        with open(os.path.join(utils_dir, name)) as f:
            bad = [m for m in _import_time_imports(f.read()) if _imports_tensorflow(m)]
        if bad:
            offenders[name] = bad
    assert offenders == {}
