"""The Optuna integration (issue 60, item 5): OptunaPruning reports a statistic each epoch and ends a
pruned trial cleanly; launch_optuna_trial returns the objective or raises TrialPruned; a study of 8
trials in 2 processes on one SQLite storage prunes and every process ends with 0; in a trial of 2
workers the chief's prune stops both after the same step, each with 0."""

import json
import os
import subprocess
import sys

import pytest

from helpers.models import LineRegression
from helpers.paths import REPO_DIR
from helpers.processes import kill_process_tree, subprocess_env

from tensorpack_lite.callbacks import Callback, OptunaPruning
from tensorpack_lite.dataflow import BatchData, DataFromList
from tensorpack_lite.train import SimpleTrainer, TrainConfig, launch_optuna_trial

optuna = pytest.importorskip('optuna')

REPO = REPO_DIR
EXAMPLE = os.path.join(REPO, 'examples', 'basics', 'tune-digits.py')
STUDY_TIMEOUT = 300


class ScriptedScore(Callback):
    """Puts 'score' = ``values[epoch - 1]`` at each epoch's end, and counts the steps."""

    def __init__(self, values):
        self.values, self.steps = values, 0

    def _trigger_step(self):
        self.steps += 1

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar('score', self.values[self.epoch_num - 1])

    def _stat_names(self):
        return ['score']


def line_config(score):
    data = BatchData(DataFromList([[float(x), 2.0 * x] for x in range(8)], shuffle=False), 4)
    return TrainConfig(model=LineRegression(), dataflow=data, callbacks=[score], steps_per_epoch=2,
                       max_epoch=len(score.values))


def run_study(values, direction='minimize', objective='last', upper=5.0):
    """One trial of an in-memory study on a scripted score, pruned by ThresholdPruner(upper)."""
    score = ScriptedScore(values)
    study = optuna.create_study(direction=direction, pruner=optuna.pruners.ThresholdPruner(upper=upper))
    study.optimize(lambda trial: launch_optuna_trial(trial, line_config(score), SimpleTrainer(), 'score',
                                                     objective=objective), n_trials=1)
    return study.trials[0], score


def test_a_pruned_trial_ends_after_its_epoch_and_is_recorded_pruned():
    trial, score = run_study([3.0, 2.0, 9.0, 1.0, 1.0])
    assert trial.state == optuna.trial.TrialState.PRUNED
    assert trial.intermediate_values == {1: 3.0, 2: 2.0, 3: 9.0}
    assert trial.user_attrs['pruned_at_epoch'] == 3
    assert score.steps == 6      # epoch 3 ran to its end, epoch 4 never started


@pytest.mark.parametrize('direction, objective, expected', [
    ('minimize', 'last', 3.0), ('minimize', 'best', 1.0), ('maximize', 'best', 4.0)])
def test_a_complete_trial_gives_the_last_or_best_value(direction, objective, expected):
    trial, score = run_study([2.0, 1.0, 4.0, 3.0], direction, objective)
    assert trial.state == optuna.trial.TrialState.COMPLETE
    assert trial.value == expected
    assert trial.intermediate_values == {1: 2.0, 2: 1.0, 3: 4.0, 4: 3.0}
    assert score.steps == 8


def test_the_state_of_a_pruned_trial_is_kept_with_checkpoints():
    study = optuna.create_study()
    pruning = OptunaPruning(study.ask(), 'score')
    pruning.last, pruning.best, pruning.pruned_at = (3, 9.0), (2, 2.0), 3
    again = OptunaPruning(study.ask(), 'score')
    again.set_state(pruning.get_state())
    assert (again.last, again.best, again.pruned_at) == ((3, 9.0), (2, 2.0), 3)


def test_errors():
    with pytest.raises(TypeError, match='takes an Optuna trial'):
        OptunaPruning(object(), 'score')
    study = optuna.create_study()
    with pytest.raises(ValueError, match="objective must be 'last' or 'best'"):
        launch_optuna_trial(study.ask(), line_config(ScriptedScore([1.0])), SimpleTrainer(), 'score',
                            objective='mean')
    with pytest.raises(TypeError, match='the chief needs the trial'):
        launch_optuna_trial(None, line_config(ScriptedScore([1.0])), SimpleTrainer(), 'score')


# Five parameter sets that learn, then three that cannot (a learning rate of 1e-3 without momentum):
# once four trials are complete (MedianPruner's n_startup_trials), which is so whenever a process
# takes one of the last three (the other process runs at most one trial meanwhile), a trial whose
# validation cost is above the median of the complete ones at epoch 2 (n_warmup_steps) is pruned.
GOOD = [dict(lr=0.05, momentum=0.9, hidden=64), dict(lr=0.2, momentum=0.5, hidden=32),
        dict(lr=0.1, momentum=0.8, hidden=48), dict(lr=0.3, momentum=0.5, hidden=64),
        dict(lr=0.1, momentum=0.9, hidden=128)]
BAD = [dict(lr=0.001, momentum=0.0, hidden=16), dict(lr=0.001, momentum=0.0, hidden=20),
       dict(lr=0.0012, momentum=0.0, hidden=16)]


def test_a_study_of_8_trials_in_2_processes_prunes_and_every_process_ends_with_0(tmp_path):
    """examples/basics/tune-digits.py (the README's model; 4 epochs of 5 steps here) in 2 processes
    of 4 trials each, sharing one SQLite storage; trial n takes the n-th parameters of a grid
    (``--grid``: with SQLite, enqueued trials can be taken by both processes)."""
    url = 'sqlite:///{}'.format(tmp_path / 'study.db')
    optuna.create_study(storage=url, study_name='digits', direction='minimize')
    grid = tmp_path / 'grid.json'
    grid.write_text(json.dumps(GOOD + BAD))
    command = [sys.executable, EXAMPLE, '--trials', '4', '--storage', url, '--study-name', 'digits',
               '--logdir', str(tmp_path / 'logs'), '--max-epoch', '4', '--steps-per-epoch', '5',
               '--grid', str(grid)]
    env = subprocess_env()
    procs = [subprocess.Popen(command, env=env, cwd=str(tmp_path), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, start_new_session=True) for _ in range(2)]
    try:
        outputs = [proc.communicate(timeout=STUDY_TIMEOUT)[0].decode('utf-8', 'replace') for proc in procs]
    finally:
        for proc in procs:
            kill_process_tree(proc)
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0, output[-5000:]

    trials = optuna.load_study(study_name='digits', storage=url).trials
    states = {t.number: t.state.name for t in trials}
    pruned = sorted(n for n, state in states.items() if state == 'PRUNED')
    complete = sorted(n for n, state in states.items() if state == 'COMPLETE')
    best = min((t for t in trials if t.state.name == 'COMPLETE'), key=lambda t: t.value)
    print("study of {} trials in 2 processes: complete {}, pruned {} (at epoch {}); best value {:.4f} "
          "(validation_cost), params {}".format(
              len(trials), complete, pruned, [trials[n].user_attrs['pruned_at_epoch'] for n in pruned],
              best.value, best.params))
    assert len(trials) == 8 and sorted(complete + pruned) == list(range(8))
    assert set(pruned) >= {5, 6, 7}                 # the three that cannot learn
    assert {trials[n].user_attrs['pruned_at_epoch'] for n in pruned} <= {2, 3}
    assert all(sorted(trials[n].intermediate_values) == [1, 2, 3, 4] for n in complete)
    assert best.number < 5 and best.value < 1.5
    assert "Study 'digits': 8 trials" in outputs[0] + outputs[1]


def test_in_a_trial_of_2_workers_the_chiefs_prune_stops_both_after_the_same_step_with_0(tmp_path):
    """tests/distributed_scripts/train_tiny_multiworker.py on 2 CollectiveAllReduceTrainer workers, 6
    epochs of 3 steps, as an Optuna trial: the chief's ThresholdPruner(upper=5) prunes it at the
    score 9 of epoch 3 (global step 9); the request travels in the next step's all-reduce, both
    workers stop after step 10 and exit 0; the chief's launch_optuna_trial raised TrialPruned, the
    other's (which has no trial) returned None."""
    from helpers.distributed import Run, load_worker
    run = Run(tmp_path, 2, 0, ['--trainer', 'collective', '--epochs', 6,
                               '--optuna-prune-above', '5:3,2,9,1,1,1'])
    assert [run.returncode('worker', k) for k in range(2)] == [0, 0], run.report()
    assert [load_worker(tmp_path, k)['global_step'] for k in range(2)] == [10, 10]
    results = [(tmp_path / 'trial{}.txt'.format(k)).read_text() for k in range(2)]
    assert results == ["TrialPruned: pruned after epoch 3 ('score' = 9)", 'None']
    assert 'every worker stops after global step 10' in run.output
