"""docs/inference.md's code, run as written (tests/helpers/guide_blocks.py): training, the predictors,
both exports loaded by plain TensorFlow in a process where tensorpack_lite is not importable,
saved_model_cli, TFLite (LiteRT) and ONNX (tf2onnx, onnxruntime) against the predictor's
probabilities, and the error of an op that does not convert."""

import os
import re

import pytest

from helpers.guide_blocks import run_guide, without_package
from helpers.paths import REPO_DIR
from helpers.processes import subprocess_env

REPO = REPO_DIR
GUIDE = os.path.join(REPO, 'docs', 'inference.md')


def test_the_inference_guide_runs_and_every_export_reproduces_the_predictor(tmp_path):
    for module in ('tf2onnx', 'onnxruntime', 'ai_edge_litert'):
        pytest.importorskip(module, reason='the [export] extra: pip install "tensorpack_lite[export]"')
    env = subprocess_env()
    output = run_guide(GUIDE, str(tmp_path), timeout=600, env=env, shell_env=without_package(tmp_path, env))
    accuracy = float(re.search(r'accuracy on 64 test digits: ([0-9.]+)', output).group(1))
    assert accuracy > 0.5, output[-3000:]           # 40 steps of Adam: far above chance (0.1)
    assert 'predicted 297 digits' in output
    differences = dict(re.findall(r'^(SavedModel|frozen graph|TFLite|ONNX): max \|difference\| (\S+)$',
                                  output, re.M))
    assert sorted(differences) == ['ONNX', 'SavedModel', 'TFLite', 'frozen graph'], output[-3000:]
    assert all(float(value) <= 1e-4 for value in differences.values()), differences
    print('accuracy', accuracy, 'max differences', differences)
    assert 'TFLite refuses it: ConverterError ... True' in output
    assert "Unsupported ops: Counter({'PyFunc': 1})" in output          # tf2onnx logs it, exits 0
    assert 'onnxruntime refuses it: InvalidGraph ... True' in output
    # saved_model_cli: the signature, then the run's output array
    assert "inputs['image'] tensor_info:" in output and "outputs['prob'] tensor_info:" in output
    assert re.search(r"Result for output key prob:\s*\n\[\[", output), output[-3000:]
