#!/usr/bin/env python
"""Tune the README's digits model with Optuna: its learning rate, momentum and hidden width, the
validation cost after each epoch reported to the trial, trials that fall behind pruned by a
MedianPruner. Every process started with the same ``--storage`` and ``--study-name`` works on the
same study (Optuna's RDB storage; SQLite is a file), so two terminals search twice as fast.

    python examples/basics/tune-digits.py --trials 10 &    # two processes, one study
    python examples/basics/tune-digits.py --trials 10; wait
    python examples/basics/tune-digits.py --trials 0       # only the study's result

``--grid FILE`` (a JSON list of ``{"lr": .., "momentum": .., "hidden": ..}``) gives trial number
``n`` the ``n``-th entry instead of a sample, each as a range of one value so that Optuna records
it. (Optuna's ``enqueue_trial`` would do it too, but with SQLite two processes can take the same
enqueued trial: SQLite has no row locks.)

About 3 minutes for the 20 trials of 10 epochs on 2 CPU cores (pruned trials end early). Each
trial logs into ``train_log/tune-digits/trial-<number>``; the study is
``train_log/tune-digits.db`` (``--storage``). Needs ``pip install optuna`` (or the extra
``tensorpack_lite[optuna]``).
"""

import argparse
import json
import os

import optuna

from tensorpack_lite import (BatchData, FullyConnected, InferenceRunner, ModelDesc, ScalarStats,
                             SimpleTrainer, TrainConfig, launch_optuna_trial, logger)
from tensorpack_lite import tfv1 as tf
from tensorpack_lite.dataflow.dataset import Digits


class Model(ModelDesc):
    """The README's model, with its hyper-parameters as arguments."""

    def __init__(self, lr, momentum, hidden):
        self.lr, self.momentum, self.hidden = lr, momentum, hidden

    def inputs(self):
        return [tf.TensorSpec([None, 8, 8], tf.float32, 'image'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, image, label):
        hidden = FullyConnected('fc1', tf.reshape(image, [-1, 64]), self.hidden, activation=tf.nn.relu)
        logits = FullyConnected('fc2', hidden, 10)
        tf.reduce_mean(tf.cast(tf.nn.in_top_k(logits, label, 1), tf.float32), name='accuracy')
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=label, logits=logits), name='cost')

    def optimizer(self):
        lr = tf.get_variable('learning_rate', initializer=self.lr, trainable=False)
        return tf.train.MomentumOptimizer(lr, self.momentum)


def hyper_parameters(trial, grid):
    """``{lr, momentum, hidden}`` of ``trial``: sampled, or the trial number's entry of ``grid``."""
    fixed = grid[trial.number] if grid else None

    def suggest(suggest_in, name, low, high, **kwargs):
        if fixed is not None:
            low = high = fixed[name]
        return suggest_in(name, low, high, **kwargs)
    return dict(lr=suggest(trial.suggest_float, 'lr', 1e-3, 1.0, log=True),
                momentum=suggest(trial.suggest_float, 'momentum', 0.0, 0.95),
                hidden=suggest(trial.suggest_int, 'hidden', 16, 128, log=True))


def make_objective(args):
    grid = None
    if args.grid:
        with open(args.grid) as f:
            grid = json.load(f)

    def objective(trial):
        model = Model(**hyper_parameters(trial, grid))
        logger.set_logger_dir(os.path.join(args.logdir, 'trial-{}'.format(trial.number)), action='d')
        config = TrainConfig(
            model=model, dataflow=BatchData(Digits('train'), 64),
            callbacks=[InferenceRunner(BatchData(Digits('test'), 99), [ScalarStats(['cost', 'accuracy'])])],
            max_epoch=args.max_epoch, steps_per_epoch=args.steps_per_epoch)
        return launch_optuna_trial(trial, config, SimpleTrainer(), 'validation_cost')
    return objective


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--trials', type=int, default=10, help='trials this process runs')
    parser.add_argument('--storage', default='sqlite:///train_log/tune-digits.db')
    parser.add_argument('--study-name', default='tune-digits')
    parser.add_argument('--logdir', default='train_log/tune-digits')
    parser.add_argument('--max-epoch', type=int, default=10)
    parser.add_argument('--steps-per-epoch', type=int, default=None, help='default: one pass over the data')
    parser.add_argument('--startup-trials', type=int, default=4, help="MedianPruner's n_startup_trials")
    parser.add_argument('--warmup-epochs', type=int, default=2, help="MedianPruner's n_warmup_steps")
    parser.add_argument('--grid', help='a JSON list of hyper-parameters: trial n takes the n-th')
    args = parser.parse_args()

    if args.storage.startswith('sqlite:///'):
        os.makedirs(os.path.dirname(os.path.abspath(args.storage[len('sqlite:///'):])), exist_ok=True)
    # several processes write the file: wait for its lock rather than fail
    storage = optuna.storages.RDBStorage(args.storage, engine_kwargs={'connect_args': {'timeout': 60}})
    study = optuna.create_study(storage=storage, study_name=args.study_name, direction='minimize',
                                load_if_exists=True, pruner=optuna.pruners.MedianPruner(
                                    n_startup_trials=args.startup_trials,
                                    n_warmup_steps=args.warmup_epochs))
    if args.trials:
        study.optimize(make_objective(args), n_trials=args.trials)

    states = [t.state for t in study.get_trials(deepcopy=False)]
    counts = {state.name.lower(): states.count(state) for state in optuna.trial.TrialState}
    print("Study '{}': {} trials, {} complete, {} pruned, {} failed, {} running.".format(
        args.study_name, len(states), counts['complete'], counts['pruned'], counts['fail'],
        counts['running']))
    if counts['complete']:
        best = study.best_trial
        params = ', '.join('{}={:.4g}'.format(k, v) for k, v in sorted(best.params.items()))
        print("Best value {:.4f} (validation_cost) in trial {}: {}".format(best.value, best.number, params))


if __name__ == '__main__':
    main()
