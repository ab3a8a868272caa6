"""The documentation site's API pages (docs/_ext/api_pages.py, run by Sphinx) give every public
name of the contract a documented entry on its module's page, and the docs the README links to
exist. (The built site, its links and its search are tested in docs/test_site.py.)"""

import inspect
import os
import re

from helpers.paths import REPO_DIR, import_file
from helpers.contract import CONTRACT, DATASET_NAMES, IMGAUG_NAMES, SECOND_ROUND, SUBMODULE_ONLY

REPO = REPO_DIR


def load_api_pages():
    return import_file(os.path.join(REPO, 'docs', '_ext', 'api_pages.py'), 'api_pages')


def contract_names():
    """(module, name) of every name of shared/API.md the tests know."""
    second_round = list(SECOND_ROUND.items()) + [('tensorpack_lite.dataflow.imgaug', IMGAUG_NAMES),
                                                 ('tensorpack_lite.dataflow.dataset', DATASET_NAMES)]
    return [(module, name) for module, names in list(CONTRACT.items()) + list(SUBMODULE_ONLY.items())
            + second_round for name in names]


def test_every_contract_name_is_documented_on_its_modules_page():
    api_pages = load_api_pages()
    found = api_pages.exported()
    home_of = api_pages.homes(found)
    pages = {module: api_pages.module_page(module, names, home_of) for module, names in found.items()}
    names = contract_names()
    assert len(names) > 250
    for module, name in names:
        assert module in pages, "{} has no API page".format(module)
        obj = dict(found[module])[name]
        kind = api_pages._kind(obj)
        directive = {'class': 'autoclass', 'function': 'autofunction'}.get(kind, 'autodata')
        # an anchor tensorpack_lite.<module>.<name>: documented here in full, or (exported by two
        # modules of the contract, ModelDesc by train and graph_builder) an entry naming the full one
        full = '.. {}:: {}.{}\n'.format(directive, module, name) in pages[module]
        entry = '<span id="{}.{}"></span>'.format(module, name) in pages[module]
        assert full or entry, (module, name)
        if kind in ('class', 'function'):
            assert inspect.getdoc(obj), "{}.{} has no docstring".format(module, name)


def test_a_name_exported_twice_is_documented_once_and_linked_from_the_other_page():
    api_pages = load_api_pages()
    found = api_pages.exported()
    home_of = api_pages.homes(found)
    tfutils = api_pages.module_page('tensorpack_lite.tfutils', found['tensorpack_lite.tfutils'], home_of)
    tower = api_pages.module_page('tensorpack_lite.tfutils.tower', found['tensorpack_lite.tfutils.tower'],
                                  home_of)
    assert '.. autofunction:: tensorpack_lite.tfutils.tower.TowerContext\n' in tower
    assert 'autofunction:: tensorpack_lite.tfutils.TowerContext' not in tfutils
    assert 'Documented at :func:`tensorpack_lite.tfutils.tower.TowerContext`' in tfutils


def test_a_listed_module_without_all_is_refused(tmp_path, monkeypatch):
    (tmp_path / 'no_all_here.py').write_text('x = 1\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    api_pages = load_api_pages()
    try:
        api_pages.exported(['no_all_here'])
    except ValueError as err:
        assert 'no_all_here has no __all__' in str(err)
    else:
        raise AssertionError('a module without __all__ was accepted')


def test_readme_links_point_to_existing_files():
    readme = open(os.path.join(REPO, 'README.md'), encoding='utf-8').read()
    links = re.findall(r'\]\(([^)#]+)', readme)
    assert len(links) >= 10
    for link in links:
        if link.startswith('http'):
            continue
        assert os.path.exists(os.path.join(REPO, link)), link
