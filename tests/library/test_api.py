"""The public names of ../shared/API.md that exist so far are importable where it says."""

import importlib

import pytest

import tensorpack_lite
from helpers.contract import CONTRACT, DATASET_NAMES, IMGAUG_NAMES, SECOND_ROUND, SUBMODULE_ONLY


@pytest.mark.parametrize('contract, module', [(CONTRACT, m) for m in sorted(CONTRACT)]
                         + [(SECOND_ROUND, m) for m in sorted(SECOND_ROUND)])
def test_names_in_module_and_top_level(contract, module):
    mod = importlib.import_module(module)
    for name in contract[module]:
        assert name in mod.__all__, (module, name)
        assert getattr(tensorpack_lite, name) is getattr(mod, name), name
        assert name in tensorpack_lite.__all__, name


@pytest.mark.parametrize('module', sorted(SUBMODULE_ONLY))
def test_submodule_names(module):
    mod = importlib.import_module(module)
    for name in SUBMODULE_ONLY[module]:
        assert callable(getattr(mod, name)), (module, name)


def test_top_level_extras():
    from tensorpack_lite import (JustCurrentSession, SessionInit, TowerContext, get_current_tower_context,
                                 get_global_step_var, logger, tfv1)
    from tensorpack_lite.tfutils import sessinit, tower
    for name in ['SaverRestore', 'SaverRestoreRelaxed', 'DictRestore', 'ChainInit', 'SmartInit',
                 'get_model_loader']:
        assert getattr(tensorpack_lite, name) is getattr(sessinit, name), name
    assert tfv1.Session is not None and callable(get_global_step_var)
    assert TowerContext is tower.TowerContext and get_current_tower_context is tower.get_current_tower_context
    assert SessionInit is sessinit.SessionInit and JustCurrentSession is sessinit.JustCurrentSession
    assert logger.get_logger_dir is tensorpack_lite.utils.logger.get_logger_dir


def test_second_round_modules_and_helpers():
    from tensorpack_lite.dataflow import imgaug
    from tensorpack_lite.dataflow import dataset
    from tensorpack_lite.tfutils.argscope import enable_argscope_for_module
    from tensorpack_lite.utils import fs, gpu, viz
    for name in IMGAUG_NAMES:
        assert name in imgaug.__all__ and hasattr(imgaug, name), name
    for name in DATASET_NAMES:
        assert name in dataset.__all__ and hasattr(dataset, name), name
    for module in ('dataset', 'imgaug', 'summary', 'varreplace'):
        assert module in tensorpack_lite.__all__ and hasattr(tensorpack_lite, module), module
    assert tensorpack_lite.enable_argscope_for_module is enable_argscope_for_module
    assert callable(fs.download) and callable(fs.get_dataset_path)
    assert callable(gpu.change_gpu) and callable(viz.intensity_to_rgb)


def test_every_all_entry_exists():
    for module in list(CONTRACT) + list(SUBMODULE_ONLY) + list(SECOND_ROUND) + [
            'tensorpack_lite', 'tensorpack_lite.utils', 'tensorpack_lite.dataflow.imgaug',
            'tensorpack_lite.dataflow.dataset']:
        mod = importlib.import_module(module)
        for name in getattr(mod, '__all__', []):
            assert hasattr(mod, name), (module, name)
