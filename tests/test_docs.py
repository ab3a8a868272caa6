"""The API reference generator (docs/gen_api.py) documents every public name, and the docs
the README links to exist."""

import importlib.util
import os
import re

from test_api import CONTRACT, DATASET_NAMES, IMGAUG_NAMES, SECOND_ROUND, SUBMODULE_ONLY

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_generator():
    spec = importlib.util.spec_from_file_location('gen_api', os.path.join(REPO, 'docs', 'gen_api.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_reference_has_a_documented_section_for_every_contract_name(tmp_path):
    gen_api = load_generator()
    gaps = gen_api.write_reference(str(tmp_path))
    assert gaps and not any(gaps.values()), gaps          # every public callable has a docstring
    pages = {name: (tmp_path / (name.replace('tensorpack_lite.', '') + '.md')) for name in gaps}
    second_round = list(SECOND_ROUND.items()) + [('tensorpack_lite.dataflow.imgaug', IMGAUG_NAMES),
                                                 ('tensorpack_lite.dataflow.dataset', DATASET_NAMES)]
    for module, names in list(CONTRACT.items()) + list(SUBMODULE_ONLY.items()) + second_round:
        if module not in pages:
            continue   # a module the reference does not list (checked below)
        text = pages[module].read_text()
        for name in names:
            section = re.search(r'^## `{}[(`].*?(?=^## |\Z)'.format(re.escape(name)), text, re.M | re.S)
            assert section, (module, name)
            assert gen_api.MISSING_DOC not in section.group(0).split('**Members**')[0], (module, name)
    listed = set(gen_api.MODULES)
    assert set(CONTRACT) | set(SECOND_ROUND) <= listed
    index = (tmp_path / 'index.md').read_text()
    assert 'not importable' not in index


def test_the_committed_reference_was_written_with_the_package_importable():
    """docs/api as committed (a regeneration without the package installed once wrote an index
    of 'not importable here' lines)."""
    pages = [name for name in os.listdir(os.path.join(REPO, 'docs', 'api')) if name.endswith('.md')]
    assert len(pages) > 30
    for name in pages:
        with open(os.path.join(REPO, 'docs', 'api', name), encoding='utf-8') as f:
            assert 'not importable here' not in f.read(), name


def test_readme_links_point_to_existing_files():
    readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    links = re.findall(r'\]\(([^)#]+)', readme)
    assert len(links) >= 10
    for link in links:
        assert os.path.exists(os.path.join(REPO, link)), link
