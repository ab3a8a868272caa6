"""The documentation's diagrams, drawn once and committed: building the site needs no Graphviz.

Each diagram is a Graphviz source ``docs/_diagrams/<name>.dot`` beside the SVG that ``dot``
draws from it (``<name>.svg``), which the pages show as an image (GitHub shows it too). The SVG
carries the SHA-256 of the source it was drawn from. As a Sphinx extension, this module warns
(an error under ``-W``) when a source has no SVG, an SVG no source, or an SVG was drawn from
another version of its source. After editing a source, redraw with Graphviz installed::

    python docs/_ext/diagrams.py

tests/docs/test_diagrams.py checks the stamps, and, where ``dot`` is installed, that each SVG
has the nodes, edges and labels ``dot`` draws from its source today.
"""

import hashlib
import os
import re
import subprocess
import sys

DIAGRAMS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '_diagrams')
_STAMP = '<!-- drawn from {} (sha256 {}) -->'
_STAMP_RE = re.compile(r'<!-- drawn from (\S+) \(sha256 ([0-9a-f]{64})\) -->')


def source_digest(path):
    """The SHA-256 (hex) of a diagram's source file."""
    with open(path, 'rb') as f:
        return hashlib.sha256(f.read()).hexdigest()


def stamp_of(svg_path):
    """``(source name, digest)`` an SVG says it was drawn from, or None."""
    with open(svg_path, encoding='utf-8') as f:
        found = _STAMP_RE.search(f.read(4096))
    return found.groups() if found else None


def stale(directory=DIAGRAMS):
    """What is out of date in ``directory``: one message per problem, [] if none."""
    names = os.listdir(directory)
    problems = []
    for name in sorted(names):
        base, ext = os.path.splitext(name)
        if ext == '.svg' and base + '.dot' not in names:
            problems.append('diagram {}: no source {}.dot beside it'.format(name, base))
        if ext != '.dot':
            continue
        svg = base + '.svg'
        if svg not in names:
            problems.append('diagram {}: never drawn (no {}); run python docs/_ext/diagrams.py'.format(
                name, svg))
        elif stamp_of(os.path.join(directory, svg)) != (name, source_digest(os.path.join(directory, name))):
            problems.append('diagram {}: {} was drawn from another version of it; run '
                            'python docs/_ext/diagrams.py'.format(name, svg))
    return problems


def draw(dot_path, dot='dot'):
    """The SVG ``dot`` draws from ``dot_path``, stamped with the source's name and digest."""
    svg = subprocess.run([dot, '-Tsvg', dot_path], check=True, capture_output=True, text=True).stdout
    stamp = _STAMP.format(os.path.basename(dot_path), source_digest(dot_path))
    declaration, newline, rest = svg.partition('\n')
    if not declaration.startswith('<?xml'):
        return stamp + '\n' + svg
    return declaration + newline + stamp + '\n' + rest


def main(directory=DIAGRAMS):
    """Redraw every diagram of ``directory`` (needs ``dot`` on the PATH)."""
    for name in sorted(os.listdir(directory)):
        if name.endswith('.dot'):
            path = os.path.join(directory, name)
            with open(path[:-len('.dot')] + '.svg', 'w', encoding='utf-8') as f:
                f.write(draw(path))
            print('drew', path[:-len('.dot')] + '.svg')


def _check(app):
    from sphinx.util import logging
    for problem in stale():
        logging.getLogger(__name__).warning(problem)


def setup(app):
    app.connect('builder-inited', _check)
    return {'parallel_read_safe': True, 'parallel_write_safe': True}


if __name__ == '__main__':
    sys.exit(main())
