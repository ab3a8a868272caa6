"""One Optuna trial, trained by :func:`launch_train_with_config`: :func:`launch_optuna_trial`."""

from ..callbacks.optuna_pruning import OptunaPruning
from ..compat import tfv1
from ..utils import logger
from ..utils.develop import import_optional
from .interface import launch_train_with_config

__all__ = ['launch_optuna_trial']

_OBJECTIVES = ('last', 'best')


def launch_optuna_trial(trial, config, trainer, monitor, objective='last'):
    """Train ``config`` on ``trainer`` for the Optuna trial ``trial`` and return its objective:
    the ``'last'`` or ``'best'`` (by the study's direction) value of the statistic ``monitor``.

    An :class:`~tensorpack_lite.callbacks.OptunaPruning` appended to ``config.callbacks``
    reports the statistic at each epoch; when the study's pruner prunes the trial, training ends
    cleanly (the epoch's callbacks run, the process goes on) and this raises
    ``optuna.TrialPruned``, so that the trial is recorded as pruned (its user attribute
    ``pruned_at_epoch`` says when). The graph is built in a ``tf.Graph`` of its own, so that one
    process can run several trials. Each trial wants a logger directory of its own: set it
    before making ``config`` (``ModelSaver`` takes it when made).

    In a trial of several processes, give the trial on the chief and None on the others: only
    the chief talks to Optuna, and its stop reaches every process (``request_stop``); the others
    return None.

    Args:
        trial (optuna.trial.Trial): the trial (None on a process that is not the chief).
        config (TrainConfig): the run, with a callback that puts ``monitor``.
        trainer (SingleCostTrainer): e.g. ``SimpleTrainer()``.
        monitor (str): the statistic, e.g. ``'validation_cost'``.
        objective (str): ``'last'`` or ``'best'`` of the values reported.

    Example::

        def objective(trial):
            lr = trial.suggest_float('lr', 1e-3, 1.0, log=True)
            logger.set_logger_dir('train_log/tune/trial-{}'.format(trial.number), action='d')
            config = TrainConfig(model=Model(lr), dataflow=train, max_epoch=10,
                                 callbacks=[InferenceRunner(test, ScalarStats('cost'))])
            return launch_optuna_trial(trial, config, SimpleTrainer(), 'validation_cost')

        optuna.create_study(storage='sqlite:///tune.db', study_name='digits', load_if_exists=True,
                            pruner=optuna.pruners.MedianPruner()).optimize(objective, n_trials=20)
    """
    optuna = import_optional('optuna', extra='optuna', purpose='launch_optuna_trial')
    if objective not in _OBJECTIVES:
        raise ValueError("launch_optuna_trial: objective must be 'last' or 'best', got {!r}".format(
            objective))
    pruning = None
    if trainer.is_chief:
        if trial is None:
            raise TypeError("launch_optuna_trial: the chief needs the trial (None only on the other "
                            "processes)")
        pruning = OptunaPruning(trial, monitor)
        config.callbacks = list(config.callbacks or []) + [pruning]
        if logger.get_logger_dir():
            trial.set_user_attr('logdir', logger.get_logger_dir())
    with tfv1.Graph().as_default():
        launch_train_with_config(config, trainer)
    if pruning is None:
        return None
    if pruning.pruned_at is not None:
        trial.set_user_attr('pruned_at_epoch', pruning.pruned_at)
        raise optuna.TrialPruned("pruned after epoch {} ('{}' = {:.5g})".format(
            pruning.pruned_at, monitor, pruning.last[1]))
    point = pruning.last if objective == 'last' else pruning.best
    if point is None:
        raise RuntimeError("launch_optuna_trial: the training of trial {} never put '{}'".format(
            getattr(trial, 'number', '?'), monitor))
    return point[1]
