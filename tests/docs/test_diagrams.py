"""The documentation's diagrams are SVGs committed beside their Graphviz sources (docs/_diagrams/,
docs/_ext/diagrams.py), so that the site builds without Graphviz. Each SVG must be drawn from its
source as it is today: its stamp says so (checked everywhere, and by the site's build), and where
``dot`` is installed (CI installs Graphviz) the SVG has what ``dot`` draws from the source."""

import os
import re
import shutil
import sys
from xml.etree import ElementTree

import pytest
from helpers.paths import REPO_DIR

REPO = REPO_DIR
sys.path.insert(0, os.path.join(REPO, 'docs', '_ext'))

import diagrams  # noqa: E402

SOURCES = sorted(name for name in os.listdir(diagrams.DIAGRAMS) if name.endswith('.dot'))
SVG = '{http://www.w3.org/2000/svg}'


def test_every_diagram_is_drawn_from_its_source_as_it_is_and_shown_by_a_page():
    assert len(SOURCES) >= 3, SOURCES
    assert diagrams.stale() == []
    pages = {name: open(os.path.join(REPO, 'docs', name), encoding='utf-8').read()
             for name in os.listdir(os.path.join(REPO, 'docs')) if name.endswith('.md')}
    shown = {found for text in pages.values() for found in re.findall(r'\]\(_diagrams/([^)]+\.svg)\)', text)}
    assert shown == {name[:-len('.dot')] + '.svg' for name in SOURCES}


def test_an_edited_source_a_missing_svg_and_an_svg_without_source_are_each_named(tmp_path):
    shutil.copytree(diagrams.DIAGRAMS, str(tmp_path / 'd'))
    first, second = SOURCES[:2]
    with open(str(tmp_path / 'd' / first), 'a') as f:
        f.write('// edited\n')
    os.remove(str(tmp_path / 'd' / (second[:-len('.dot')] + '.svg')))
    shutil.copy(str(tmp_path / 'd' / SOURCES[2].replace('.dot', '.svg')), str(tmp_path / 'd' / 'orphan.svg'))
    problems = diagrams.stale(str(tmp_path / 'd'))
    assert len(problems) == 3, problems
    assert any(p.startswith('diagram {}: '.format(first)) and 'another version' in p for p in problems)
    assert any(p.startswith('diagram {}: never drawn'.format(second)) for p in problems)
    assert 'diagram orphan.svg: no source orphan.dot beside it' in problems


def drawn_content(svg_text):
    """What a reader sees of a Graphviz SVG: each node, edge and cluster (its title) with its texts."""
    root = ElementTree.fromstring(svg_text.encode('utf-8'))
    content = []
    for group in root.iter(SVG + 'g'):
        if group.get('class') in ('node', 'edge', 'cluster'):
            texts = [t.text for t in group.iter(SVG + 'text')]
            content.append((group.get('class'), group.find(SVG + 'title').text, texts))
    return sorted(content)


@pytest.mark.parametrize('source', SOURCES)
def test_each_svg_has_what_dot_draws_from_its_source(source):
    dot = shutil.which('dot')
    if dot is None:
        pytest.skip("no 'dot' on the PATH (apt-get install graphviz): only the SVGs' stamps are checked")
    path = os.path.join(diagrams.DIAGRAMS, source)
    with open(path[:-len('.dot')] + '.svg', encoding='utf-8') as f:
        committed = f.read()
    drawn = diagrams.draw(path, dot)
    assert drawn_content(committed) == drawn_content(drawn)
    assert len(drawn_content(drawn)) >= 8
    assert diagrams.stamp_of(path[:-len('.dot')] + '.svg') == (source, diagrams.source_digest(path))
