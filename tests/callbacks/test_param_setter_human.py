"""HumanHyperParamSetter refuses values that are not finite numbers (nan, inf, 1e999) read from
its file: the parameter keeps its value, the weights stay finite, and the log names the file,
the line and the value."""

import logging
import math
import os

import numpy as np

from tensorpack_lite.callbacks.base import Callback
from tensorpack_lite.callbacks.param_feedback import HumanHyperParamSetter
from tensorpack_lite.compat import tfv1
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_train_with_config

from helpers.models import LINE_INITIAL_LR, LineRegression

INITIAL_LR = LINE_INITIAL_LR
XS = np.linspace(-1, 1, 8).astype('float32')
BATCH = 4   # two steps per epoch, in the order of XS


class EditAndRecord(Callback):
    """At the end of epoch e: writes ``edits[e]`` (if any) into the file, and records the
    learning rate and w that epoch ran with / ended with."""

    def __init__(self, path, edits):
        self.path, self.edits = path, edits
        self.lr_of_epoch, self.w_after_epoch = {}, {}

    def _setup_graph(self):
        variables = {v.op.name: v for v in tfv1.global_variables()}
        self.lr, self.w = variables['learning_rate'], variables['w']

    def _trigger(self):
        lr, w = self.trainer.sess.run([self.lr, self.w])
        self.lr_of_epoch[self.epoch_num] = float(lr)
        self.w_after_epoch[self.epoch_num] = float(w)
        if self.epoch_num in self.edits:
            with open(self.path, 'w') as f:
                f.write(self.edits[self.epoch_num])


def expected_w(lr_of_epoch):
    """w after each epoch of plain SGD on mean((w x - 3 x)^2), computed in float64:
    the gradient on a batch is 2 (w - 3) mean(x^2)."""
    w, result = 0.0, {}
    for epoch in sorted(lr_of_epoch):
        for start in range(0, len(XS), BATCH):
            batch = XS[start:start + BATCH].astype('float64')
            w -= lr_of_epoch[epoch] * 2 * (w - 3) * np.mean(batch ** 2)
        result[epoch] = w
    return result


def test_values_that_are_not_finite_are_refused_and_the_weights_stay_finite(logdir, log_records):
    path = os.path.join(logdir, 'hyper.txt')
    # the setter runs after the editor: an edit at the end of epoch e applies from epoch e + 1
    editor = EditAndRecord(path, {
        1: "learning_rate:0.05\n",
        2: "learning_rate:nan\n",
        3: "# a comment\nlearning_rate: inf\n",
        4: "learning_rate:1e999\n",    # float('1e999') is inf
        5: "learning_rate:0.02\n",
    })
    dataflow = BatchData(DataFromList([[x, 3 * x] for x in XS], shuffle=False), BATCH)
    config = TrainConfig(model=LineRegression(), dataflow=dataflow, max_epoch=6,
                         callbacks=[editor, HumanHyperParamSetter('learning_rate')])
    launch_train_with_config(config, SimpleTrainer())

    f32 = lambda v: float(np.float32(v))
    assert editor.lr_of_epoch == {1: f32(INITIAL_LR), 2: f32(0.05), 3: f32(0.05), 4: f32(0.05),
                                  5: f32(0.05), 6: f32(0.02)}
    assert all(math.isfinite(w) for w in editor.w_after_epoch.values())
    expected = expected_w({1: INITIAL_LR, 2: 0.05, 3: 0.05, 4: 0.05, 5: 0.05, 6: 0.02})
    assert np.allclose([editor.w_after_epoch[e] for e in range(1, 7)], [expected[e] for e in range(1, 7)],
                       rtol=1e-5)

    warnings = log_records.messages_at(logging.WARNING)
    for lineno, value in [(1, "'nan'"), (2, "'inf'"), (1, "'1e999'")]:
        message = ("[HumanHyperParamSetter] {}:{}: learning_rate is set to {}, which is not a finite "
                   "number: learning_rate is left unchanged.".format(path, lineno, value))
        assert warnings.count(message) == 1, (message, warnings)
    assert not any("has no entry" in m for m in warnings)   # the entry is there, only refused
