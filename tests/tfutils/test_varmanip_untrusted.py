"""Hostile and unlucky inputs (issue 13): weights files are never unpickled, data channels drop
bad messages and can be encrypted, hung workers are reported, killed runs leave no files,
resource failures are explained, and hyper-parameters stay finite."""

import logging
import os
import pickle

import numpy as np
import pytest

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.predict.base import OfflinePredictor
from tensorpack_lite.predict.config import PredictConfig
from tensorpack_lite.tfutils.sessinit import DictRestore, SmartInit, get_model_loader

from helpers.models import LineRegression


class _RunsCode:
    """Unpickling this object would create the file ``path``: the attack."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, 'w'))


def _pickled_npy(path, marker):
    arr = np.empty((), dtype=object)
    arr[()] = {'W': _RunsCode(marker)}
    np.save(path, arr, allow_pickle=True)


# ---- item 3: no code runs from a weights file -------------------------------------------------

@pytest.mark.parametrize('load', [SmartInit, get_model_loader])
def test_a_pickled_npy_is_refused_without_running_its_code(tmp_path, load):
    path, marker = str(tmp_path / 'weights.npy'), str(tmp_path / 'pwned')
    _pickled_npy(path, marker)
    with pytest.raises(ValueError, match=r"weights\.npy' holds an object array or a pickle.*never loaded"):
        load(path)
    assert not os.path.exists(marker)


def test_an_npz_with_a_pickled_member_is_refused_naming_file_and_member(tmp_path):
    path, marker = str(tmp_path / 'weights.npz'), str(tmp_path / 'pwned')
    payload = np.empty((), dtype=object)
    payload[()] = _RunsCode(marker)
    np.savez(path, W=np.ones(2, 'float32'), evil=payload)
    with pytest.raises(ValueError,
                       match=r"weights\.npz' holds an object array or a pickle \(member 'evil'\)"):
        SmartInit(path)
    assert not os.path.exists(marker)


def test_a_raw_pickle_named_npz_is_refused_without_running_its_code(tmp_path):
    path, marker = str(tmp_path / 'weights.npz'), str(tmp_path / 'pwned')
    with open(path, 'wb') as f:
        pickle.dump({'W': _RunsCode(marker)}, f)
    with pytest.raises(ValueError, match=r"weights\.npz' holds an object array or a pickle"):
        get_model_loader(path)
    assert not os.path.exists(marker)


def test_a_plain_npy_array_is_not_a_dict_of_variables(tmp_path):
    path = str(tmp_path / 'one.npy')
    np.save(path, np.zeros((2, 3), 'float32'))
    with pytest.raises(ValueError, match=r"one\.npy' holds a single float32 array of shape \(2, 3\)"):
        SmartInit(path)


def test_a_plain_npz_still_loads(tmp_path):
    path = str(tmp_path / 'w.npz')
    np.savez(path, W=np.arange(3, dtype='float32'))
    var = tfv1.get_variable('W', initializer=np.zeros(3, 'float32'))
    with tfv1.Session() as sess:
        sess.run(tfv1.global_variables_initializer())
        SmartInit(path).init(sess)
        np.testing.assert_array_equal(sess.run(var), [0, 1, 2])


@pytest.mark.parametrize('declared, refusal', [
    ('|O', 'dtype object; object and structured arrays are refused'),
    ([['a', '|O']], r"dtype \[\['a', '\|O'\]\]; only plain dtype strings"),
])
def test_a_message_declaring_an_object_dtype_is_refused(declared, refusal):
    import msgpack

    from tensorpack_lite.utils.serialize import _PREFIX, loads
    header = msgpack.packb([declared, [1]])
    body = _PREFIX.pack(len(header), _PREFIX.size + len(header)) + header + b'\0' * 8
    with pytest.raises(ValueError, match=refusal):
        loads(msgpack.packb(msgpack.ExtType(1, body)))


# ---- issue 15: a trained session's variables load into a predictor ---------------------------

def _linear():
    """x w ('pred', w is 'fc/W' from 0) fitted to 1 by Adam, the rate in a variable 'learning_rate'."""
    return LineRegression(dim=2, target=1.0, lr=0.1, optimizer=tfv1.train.AdamOptimizer, weight='fc/W')


def _trained_variables():
    """``{v.op.name: value}`` of every global variable after two Adam steps on _linear()."""
    with tfv1.Graph().as_default():
        model = _linear()
        x = tfv1.placeholder(tf.float32, [None, 2], 'x')
        cost = model.build_graph(x)
        step = tfv1.train.get_or_create_global_step()
        train_op = model.optimizer().minimize(cost, global_step=step)
        with tfv1.Session() as sess:
            sess.run(tfv1.global_variables_initializer())
            for _ in range(2):
                sess.run(train_op, {x: [[1.0, 2.0]]})
            return {v.op.name: sess.run(v) for v in tfv1.global_variables()}


def test_a_trained_sessions_variables_load_into_a_predictor(log_records):
    values = _trained_variables()
    assert {'global_step', 'learning_rate', 'fc/W/Adam', 'beta1_power'} <= set(values)
    assert not np.allclose(values['fc/W'], 0)
    config = PredictConfig(model=_linear(), input_names=['x'], output_names=['pred'],
                           session_init=DictRestore(values))
    predictor = OfflinePredictor(config)
    out, = predictor(np.array([[1.0, 1.0]], 'float32'))
    np.testing.assert_allclose(out, values['fc/W'].sum(axis=0, keepdims=True), rtol=1e-6)
    skipped = [m for m in log_records.messages(logging.INFO) if 'training-only' in m]
    assert len(skipped) == 1 and 'global_step' in skipped[0] and 'fc/W/Adam_1' in skipped[0]


def test_a_strict_dict_restore_refuses_an_unknown_model_variable_but_not_training_names():
    tfv1.get_variable('fc/W', shape=[2, 1])
    with pytest.raises(ValueError, match=r"1 name\(s\) are not variables of the graph: fc/b\."):
        DictRestore({'fc/W': np.zeros((2, 1)), 'fc/b': np.zeros(1), 'global_step': 5},
                    strict=True).setup_graph()
