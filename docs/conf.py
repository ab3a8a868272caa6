"""Sphinx configuration of the documentation site: ``pip install -e ".[docs]"``, then
``sphinx-build -W --keep-going -b html docs docs/_build/html``."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '_ext'))

from tensorpack_lite.libinfo import __version__  # noqa: E402

project = 'tensorpack_lite'
author = 'the tensorpack_lite authors'
release = version = __version__

extensions = [
    'myst_parser',                 # the guides are Markdown, readable on GitHub as they are
    'sphinx.ext.autodoc',          # the API pages come from the docstrings
    'sphinx.ext.napoleon',         # Google-style Args/Returns, as tensorpack wrote them
    'diagrams',                    # docs/_ext/diagrams.py: the committed diagrams match their sources
    'api_pages',                   # docs/_ext/api_pages.py: one page per module, checks
]

source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
root_doc = 'index'
exclude_patterns = ['_build', 'README.md', '_data']
templates_path = []

myst_heading_anchors = 4           # [text](page.md#a-heading) links resolve
myst_enable_extensions = ['colon_fence']

autodoc_member_order = 'bysource'
autodoc_typehints = 'none'
autodoc_default_options = {'exclude-members': '__init__,__weakref__,__dict__,__module__'}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False

nitpicky = True                    # an unresolved reference of the package is a warning (-W: an error)
suppress_warnings = []

html_theme = 'furo'
html_title = 'tensorpack_lite {}'.format(version)
html_static_path = ['_static']
html_favicon = '_static/favicon.svg'
html_show_sourcelink = False
html_copy_source = False


def _draw_run_curves(app):
    """The training curves shown in checkpoints.md, drawn by the library's own plotter from a real
    run's stats.json (examples/basics/mnist-convnet.py, default settings) when the site is built."""
    import subprocess
    here = os.path.dirname(os.path.abspath(__file__))
    os.makedirs(os.path.join(here, '_generated'), exist_ok=True)
    run_dir = os.path.join(here, '_data', 'mnist-convnet')
    subprocess.run([sys.executable, '-m', 'tensorpack_lite.utils.plot', run_dir,
                    '--keys', '^(validation_)?(accuracy|cross_entropy_loss)$',
                    '--output', os.path.join(here, '_generated', 'mnist-convnet-curves.png')],
                   check=True, env=dict(os.environ, MPLBACKEND='Agg', TF_CPP_MIN_LOG_LEVEL='2'))


def setup(app):
    app.connect('builder-inited', _draw_run_curves)
