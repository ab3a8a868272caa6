"""A Sphinx extension that writes the API reference's pages from the package at build time.

One page per module of :data:`MODULES` (``api/<module>.rst`` under the source directory, not
committed), listing its ``__all__`` in order with autodoc. A name that several listed modules
export is documented once, in its home module (the listed module nearest to where it is
defined), and the other pages link to it. The build then checks what a reader relies on:

- every public class or function has a docstring (a name without one is a warning);
- a cross-reference to a name of this package resolves. A short name (``:class:`ClusterConfig```
  written in another module) resolves to the one documented object of that name; a name that
  is not the package's (``tf.Tensor``, ``int``) is left as text.

Run with ``-W`` (warnings are errors), a missing docstring or an unresolved reference of the
package fails the build.
"""

import importlib
import inspect
import os

from sphinx.util import logging
from sphinx.util.nodes import make_refnode

logger = logging.getLogger(__name__)

CONTRACT_MODULES = [
    # the public contract (shared/API.md), in reading order: a name they export has its anchor here
    'tensorpack_lite.train',
    'tensorpack_lite.train.elastic',
    'tensorpack_lite.callbacks',
    'tensorpack_lite.input_source',
    'tensorpack_lite.graph_builder',
    'tensorpack_lite.models',
    'tensorpack_lite.predict',
    'tensorpack_lite.dataflow',
    'tensorpack_lite.dataflow.dataset',
    'tensorpack_lite.dataflow.imgaug',
    'tensorpack_lite.tfutils',
    'tensorpack_lite.tfutils.tower',
    'tensorpack_lite.tfutils.argscope',
    'tensorpack_lite.tfutils.scope_utils',
    'tensorpack_lite.tfutils.sessinit',
    'tensorpack_lite.tfutils.sesscreate',
    'tensorpack_lite.tfutils.summary',
    'tensorpack_lite.tfutils.optimizer',
    'tensorpack_lite.precision.mixed_precision',
    'tensorpack_lite.precision.loss_scale',
    'tensorpack_lite.tfutils.gradproc',
    'tensorpack_lite.tfutils.varreplace',
    'tensorpack_lite.tfutils.varmanip',
    'tensorpack_lite.tfutils.dependency',
    'tensorpack_lite.tfutils.symbolic_functions',
    'tensorpack_lite.tfutils.common',
    'tensorpack_lite.tfutils.collection',
    'tensorpack_lite.tfutils.model_utils',
    'tensorpack_lite.tfutils.export',
    'tensorpack_lite.tfutils.distributed',
    'tensorpack_lite.multiprocess.server',
    'tensorpack_lite.utils.logger',
    'tensorpack_lite.utils.argtools',
    'tensorpack_lite.utils.stats',
    'tensorpack_lite.utils.utils',
    'tensorpack_lite.utils.serialize',
    'tensorpack_lite.utils.concurrency',
    'tensorpack_lite.utils.viz',
    'tensorpack_lite.utils.gpu',
    'tensorpack_lite.utils.fs',
    'tensorpack_lite.utils.develop',
]

MORE_MODULES = [
    # what the contract's docstrings refer to, and what a researcher extending the library reads
    'tensorpack_lite.train.trainers',
    'tensorpack_lite.train.multiprocess_trainer',
    'tensorpack_lite.train.distributed',
    'tensorpack_lite.callbacks.monitors.tracking',
    'tensorpack_lite.callbacks.stat_reader',
    'tensorpack_lite.utils.outbox',
    'tensorpack_lite.checkpoint.files',
    'tensorpack_lite.checkpoint.state_file',
    'tensorpack_lite.checkpoint.directory',
    'tensorpack_lite.checkpoint.verify',
    'tensorpack_lite.checkpoint.writer',
    'tensorpack_lite.checkpoint.commit',
    'tensorpack_lite.checkpoint.copy',
    'tensorpack_lite.checkpoint.resume_state',
    'tensorpack_lite.checkpoint.resume_point',
    'tensorpack_lite.checkpoint.remote',
    'tensorpack_lite.callbacks.remote_sync',
    'tensorpack_lite.utils.object_store',
    'tensorpack_lite.utils.run_dir_sync',
    'tensorpack_lite.input_source.data_position',
    'tensorpack_lite.dataflow.state',
    'tensorpack_lite.dataflow.raw',
    'tensorpack_lite.dataflow.parallel_base',
    'tensorpack_lite.dataflow.shards.convert',
    'tensorpack_lite.dataflow.shards.format',
    'tensorpack_lite.dataflow.shards.order',
    'tensorpack_lite.dataflow.shards.cache',
    'tensorpack_lite.dataflow.shards.store',
    'tensorpack_lite.dataflow.shards.share',
    'tensorpack_lite.session.hooked_session',
    'tensorpack_lite.session.caller_thread',
    'tensorpack_lite.session.failure',
    'tensorpack_lite.graph_builder.devices',
    'tensorpack_lite.graph_builder.distributed',
    'tensorpack_lite.graph_builder.rank_towers',
    'tensorpack_lite.graph_builder.replica_optimizer',
    'tensorpack_lite.graph_builder.mpi_ops',
    'tensorpack_lite.graph_builder.compression',
    'tensorpack_lite.graph_builder.backprop_order',
    'tensorpack_lite.graph_builder.pieces',
    'tensorpack_lite.graph_builder.accumulation',
    'tensorpack_lite.callbacks.accumulation',
    'tensorpack_lite.multiprocess.collective',
    'tensorpack_lite.multiprocess.sync_statistics',
    'tensorpack_lite.multiprocess.stop_vote',
    'tensorpack_lite.coordination.protocol',
    'tensorpack_lite.coordination.tf_runtime',
    'tensorpack_lite.coordination.mpi',
    'tensorpack_lite.profiling.step_timeline',
    'tensorpack_lite.profiling.graph_walk',
    'tensorpack_lite.tfutils.cost_terms',
    'tensorpack_lite.tfutils.gradient_order',
    'tensorpack_lite.profiling.flops',
    'tensorpack_lite.callbacks.step_monitor',
    'tensorpack_lite.profiling.peak_flops',
    'tensorpack_lite.utils.cpu',
    'tensorpack_lite.loop.dispatch',
    'tensorpack_lite.models.layout',
    'tensorpack_lite.dataflow.image',
    'tensorpack_lite.dataflow.dataset.common',
    'tensorpack_lite.dataflow.imgaug.imgproc',
    'tensorpack_lite.utils.stats_json',
    'tensorpack_lite.utils.zmq_security',
    'tensorpack_lite.utils.mpi_launcher',
    'tensorpack_lite.utils.death_signal',
    'tensorpack_lite.compat',
    # processes and clusters
    'tensorpack_lite.cluster.source',
    'tensorpack_lite.cluster.config',
    'tensorpack_lite.cluster.slurm',
    'tensorpack_lite.cluster.ray',
    'tensorpack_lite.cluster.resize',
    'tensorpack_lite.cluster.supervisor',
    'tensorpack_lite.cluster.launch',
    'tensorpack_lite.cluster.preemption',
    'tensorpack_lite.cluster.exposure',
    'tensorpack_lite.cluster.private_network',
    'tensorpack_lite.cluster.netns',
    'tensorpack_lite.cluster.mpi_rank',
]

MODULES = CONTRACT_MODULES + MORE_MODULES

PAGE_DIR = 'api'


def page_name(module_name):
    return module_name.replace('tensorpack_lite.', '')


def _kind(obj):
    if inspect.ismodule(obj):
        return 'module'
    if inspect.isclass(obj):
        return 'class'
    if inspect.isfunction(obj) or inspect.isbuiltin(obj):
        return 'function'
    return 'data'


def exported(modules=MODULES):
    """{module: [(name, object)]} in ``__all__`` order; a listed module without ``__all__`` is
    an error (the reference lists declared names only)."""
    found = {}
    for module_name in modules:
        module = importlib.import_module(module_name)
        if not hasattr(module, '__all__'):
            raise ValueError("{} has no __all__: the API reference lists declared names only".format(
                module_name))
        found[module_name] = [(name, getattr(module, name)) for name in module.__all__]
    return found


def homes(found):
    """{id(object): module} for the objects exported by several modules: among the contract's
    modules when one exports it, the module nearest to where the object is defined (the longest
    common prefix), else the first listed."""
    candidates = {}
    for module_name, names in found.items():
        for name, obj in names:
            if _kind(obj) in ('class', 'function'):
                candidates.setdefault(id(obj), []).append(module_name)
    result = {}
    for key, modules in candidates.items():
        obj = next(o for n, o in found[modules[0]] if id(o) == key)
        modules = [m for m in modules if m in CONTRACT_MODULES] or modules
        defined_in = getattr(obj, '__module__', '') or ''

        def closeness(module_name, defined_in=defined_in):
            return len(os.path.commonprefix([module_name.split('.'), defined_in.split('.')]))
        # equally close: the more specific module (tfutils.tower before tfutils), then the first listed
        result[key] = max(modules, key=lambda m: (closeness(m), m.count('.'), -modules.index(m)))
    return result


def module_page(module_name, names, home_of):
    title = '``{}``'.format(module_name)
    lines = [title, '=' * len(title), '', '.. automodule:: {}'.format(module_name), '   :no-members:', '']
    for name, obj in names:
        kind = _kind(obj)
        if kind == 'module':
            lines += ['- submodule :mod:`{}`'.format(obj.__name__), '']
            continue
        home = home_of.get(id(obj), module_name)
        if home != module_name:
            target = '{}.{}'.format(home, getattr(obj, '__name__', name))
            role = 'class' if kind == 'class' else 'func'
            # one entry in the index (the full one, so that a short name finds one object); on a
            # page of the contract the name keeps its anchor (#tensorpack_lite.train.ModelDesc)
            if module_name in CONTRACT_MODULES:
                lines += ['.. raw:: html', '', '   <span id="{}.{}"></span>'.format(module_name, name), '']
            lines += ['.. py:{}:: {}'.format('class' if kind == 'class' else 'function', name),
                      '   :no-index:', '', '   Documented at :{}:`{}`.'.format(role, target), '']
            continue
        if kind == 'class':
            lines += ['.. autoclass:: {}.{}'.format(module_name, name), '   :members:',
                      '   :show-inheritance:', '']
        elif kind == 'function':
            lines += ['.. autofunction:: {}.{}'.format(module_name, name), '']
        else:
            lines += ['.. autodata:: {}.{}'.format(module_name, name), '   :annotation:', '']
    return '\n'.join(lines)


def write_pages(app):
    """Write the pages, and note the names the reference resolver needs (see _ours)."""
    found = exported()
    home_of = homes(found)
    for module_name, names in found.items():
        _OUR_NAMES.update(name for name, _ in names)
        _HOME_NAMES.update('{}.{}'.format(module_name, getattr(obj, '__name__', name)) for name, obj in names
                           if home_of.get(id(obj)) == module_name)
    directory = os.path.join(app.srcdir, PAGE_DIR)
    os.makedirs(directory, exist_ok=True)
    for module_name, names in found.items():
        _write_if_changed(os.path.join(directory, page_name(module_name) + '.rst'),
                          module_page(module_name, names, home_of))
        for name, obj in names:
            if _kind(obj) in ('class', 'function') and home_of.get(id(obj), module_name) == module_name \
                    and not inspect.getdoc(obj):
                logger.warning("API reference: %s.%s has no docstring", module_name, name)
    index = ['API reference', '=============', '',
             'One page per module, written from the docstrings when the site is built.', '',
             '.. toctree::', '   :maxdepth: 1', '']
    index += ['   {}'.format(page_name(m)) for m in found]
    _write_if_changed(os.path.join(directory, 'index.rst'), '\n'.join(index) + '\n')


def _write_if_changed(path, text):
    """Sphinx rebuilds what changed: an unchanged page keeps its time stamp."""
    if os.path.exists(path):
        with open(path, encoding='utf-8') as f:
            if f.read() == text:
                return
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)


def _ours(target):
    """Whether ``target`` names a public object of the package (a private name, ``_Base``,
    is an implementation detail: text, not a link)."""
    last = target.split('.')[-1]
    if last.startswith('_'):
        return False
    return target.startswith('tensorpack_lite') or last in _OUR_NAMES


_OUR_NAMES = set()
"""Every name a listed module exports."""
_HOME_NAMES = set()
"""The full names of the objects exported by several modules, in their home module."""


def resolve_short_names(app, env, node, contnode):
    """A reference the Python domain did not find: a short name of the package's resolves to
    its one documented object; a name that is not the package's stays text."""
    if node.get('refdomain') != 'py':
        return None
    target = node.get('reftarget', '')
    if not _ours(target):
        return contnode
    domain = env.get_domain('py')
    parts = target.split('.')
    shortest = 2 if node.get('reftype') in ('meth', 'attr') and len(parts) > 1 else 1   # 'Class.method'
    for start in range(len(parts) - shortest + 1):   # 'pkg.module.Class', then 'module.Class', ...
        suffix = '.'.join(parts[start:])
        matches = domain.find_obj(env, node.get('py:module'), node.get('py:class'), suffix, None,
                                  searchmode=1)
        matches = [(name, obj) for name, obj in matches if not obj.aliased]
        if matches:
            break
    if len(matches) > 1:   # a name exported by several modules: its full entry
        matches = [(name, obj) for name, obj in matches if name in _HOME_NAMES]
    if len(matches) != 1:
        return None      # unresolved or ambiguous: Sphinx warns (nitpicky)
    name, obj = matches[0]
    return make_refnode(app.builder, node['refdoc'], obj.docname, obj.node_id, contnode, name)


def drop_foreign_docstrings(app, what, name, obj, options, lines):
    """A method that overrides TensorFlow's (an optimizer's ``compute_gradients``) without a
    docstring of its own would show TensorFlow's, written for another renderer: show none."""
    if what not in ('method', 'property') or getattr(obj, '__doc__', None) is not None:
        return
    function = getattr(obj, 'fget', obj)
    owner = importlib.import_module(function.__module__)
    for part in function.__qualname__.split('.')[:-1]:
        owner = getattr(owner, part, None)
    for base in getattr(owner, '__mro__', ())[1:]:
        inherited = base.__dict__.get(function.__name__)
        if inherited is not None and getattr(inherited, '__doc__', None):
            if not base.__module__.startswith('tensorpack_lite'):
                lines[:] = []
            return


def setup(app):
    app.connect('autodoc-process-docstring', drop_foreign_docstrings)
    app.connect('builder-inited', write_pages)
    app.connect('missing-reference', resolve_short_names)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}
