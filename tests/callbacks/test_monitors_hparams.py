"""TensorBoardHParams: what TensorBoard's HParams tab shows of a run, read back with TensorBoard's
own code (its event multiplexer, data provider and the hparams plugin's request handlers, which
parse the plugin data), after real trainings of a tiny model: finished, failed in a callback,
killed then resumed in the same directory."""

import glob
import logging
import os

import numpy as np
import pytest

pytest.importorskip('tensorboard', reason="TensorBoardHParams needs the tensorboard package "
                    "(pip install 'tensorpack_lite[tensorboard]')")

from tensorboard import context  # noqa: E402
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer  # noqa: E402
from tensorboard.plugins import base_plugin  # noqa: E402
from tensorboard.plugins.hparams import (api_pb2, backend_context, get_experiment,  # noqa: E402
                                         list_session_groups, metadata)

from tensorpack_lite.callbacks.base import Callback  # noqa: E402
from tensorpack_lite.callbacks.monitor import JSONWriter, NoOpMonitor, TFEventWriter  # noqa: E402
from tensorpack_lite.callbacks.monitors.hparams import TensorBoardHParams  # noqa: E402
from tensorpack_lite.callbacks.monitors.tracking import run_parameters  # noqa: E402
from tensorpack_lite.callbacks.saver import ModelSaver  # noqa: E402
from tensorpack_lite.cluster.preemption import Preempted  # noqa: E402
from tensorpack_lite.compat import tfv1  # noqa: E402
from tensorpack_lite.dataflow import BatchData, DataFromList  # noqa: E402
from tensorpack_lite.train import (AutoResumeTrainConfig, SimpleTrainer, TrainConfig,  # noqa: E402
                                   launch_train_with_config)
from tensorpack_lite.utils import logger, stats_json  # noqa: E402

from helpers.models import LineRegression  # noqa: E402
from helpers.stats_records import TIMING_PREFIX  # noqa: E402

STEPS = 2          # per epoch: 8 points in batches of 4
PARAMS = {'lr': 0.3, 'depth': 18, 'augment': True, 'arch': 'line', 'seed': np.int64(7)}


class PutMetrics(Callback):
    """At the end of epoch e, puts the scalars ``values[e]`` (a dict), then raises ``error`` at
    epoch ``fail_at``."""

    def __init__(self, values, fail_at=None, error=None):
        self.values, self.fail_at, self.error = values, fail_at, error

    def _trigger(self):
        for name, value in self.values.get(self.epoch_num, {}).items():
            self.trainer.monitors.put_scalar(name, value)
        if self.epoch_num == self.fail_at:
            raise self.error


def train(directory, callbacks, max_epoch, hparams_args, resume=False, tfevents=True):
    """Train LineRegression in ``directory`` (kept, so a resumed run continues there) with the
    callbacks ``callbacks()`` makes and ``TensorBoardHParams(**hparams_args)``; returns the
    trainer (also when training raised, as ``error.trainer``)."""
    logger.set_logger_dir(directory, action='k')
    trainer = SimpleTrainer()
    try:
        xs = np.linspace(-1, 1, 8).astype('float32')
        dataflow = BatchData(DataFromList([[x, 3 * x] for x in xs], shuffle=False), 4)
        monitors = [JSONWriter(), TensorBoardHParams(**hparams_args)]
        monitors += [TFEventWriter()] if tfevents else []
        config_class = AutoResumeTrainConfig if resume else TrainConfig
        with tfv1.Graph().as_default():
            config = config_class(model=LineRegression(), dataflow=dataflow, callbacks=callbacks(),
                                  monitors=monitors, max_epoch=max_epoch)
            launch_train_with_config(config, trainer)
    except BaseException as err:
        err.trainer = trainer
        raise
    finally:
        logger.unset_logger_dir()
    return trainer


def hparams_tab(root):
    """What the HParams tab of a TensorBoard started on ``root`` shows: ``(experiment,
    sessions)``, the experiment (hyper-parameters and metrics) and ``{run name: Session}``,
    as TensorBoard's hparams plugin answers the tab's requests."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(root)
    multiplexer.Reload()
    tb_context = base_plugin.TBContext(logdir=root, multiplexer=multiplexer,
                                       data_provider=data_provider.MultiplexerDataProvider(multiplexer, root))
    plugin = backend_context.Context(tb_context)
    request = context.RequestContext()
    experiment = get_experiment.Handler(request, plugin, '', api_pb2.GetExperimentRequest()).run()
    groups = list_session_groups.Handler(request, plugin, '', api_pb2.ListSessionGroupsRequest(
        allowed_statuses=list(api_pb2.Status.values()), slice_size=100)).run()
    sessions = {}
    for group in groups.session_groups:
        for session in group.sessions:
            sessions[session.name] = (group, session)
    return experiment, sessions


def run_view(directory):
    """The tab's view of the single run in ``directory``: experiment, session group, session."""
    experiment, sessions = hparams_tab(os.path.dirname(directory))
    assert list(sessions) == [os.path.basename(directory)]
    group, session = sessions[os.path.basename(directory)]
    return experiment, group, session


def hparam_values(group):
    """The session group's hyper-parameters as Python values of the type TensorBoard holds."""
    values = {}
    for name, value in group.hparams.items():
        kind = value.WhichOneof('kind')
        values[name] = {'bool_value': value.bool_value, 'number_value': value.number_value,
                        'string_value': value.string_value}[kind]
    return values


def metric_values(session):
    return {m.name.tag: (m.training_step, m.value) for m in session.metric_values}


def last_in_stats(directory):
    """The global step and last value of every scalar in ``stats.json``, the value in float32 as
    TensorBoard's scalars hold it."""
    history = stats_json.scalar_history(stats_json.load_records(directory))
    return {name: (points[-1][0], float(np.float32(points[-1][1]))) for name, points in history.items()}


def hparams_files(directory):
    return glob.glob(os.path.join(directory, 'events.out.tfevents.*.hparams'))


# ----- the runs (each trained once per module) ---------------------------------------------------

@pytest.fixture(scope='module')
def finished(tmp_path_factory):
    """Two epochs, every scalar a metric (metrics=None), no TFEventWriter."""
    directory = str(tmp_path_factory.mktemp('finished') / 'run')
    values = {1: {'val-error': 0.5, 'cost': 4.0}, 2: {'val-error': 0.25, 'cost': 2.0}}
    trainer = train(directory, lambda: [PutMetrics(values)], 2, {'params': PARAMS}, tfevents=False)
    return directory, trainer


@pytest.fixture(scope='module')
def failed(tmp_path_factory):
    """Listed metrics (one never put); a callback raises at the end of epoch 2."""
    directory = str(tmp_path_factory.mktemp('failed') / 'run')
    values = {1: {'val-error': 0.5, 'other': 1.0}, 2: {'val-error': 0.4, 'other': 2.0}}
    with pytest.raises(ValueError, match='broken callback') as raised:
        train(directory, lambda: [PutMetrics(values, fail_at=2, error=ValueError('broken callback'))], 3,
              {'params': {'lr': 0.1}, 'metrics': ['val-error', 'never-put'], 'trial_id': 'trial-7'})
    return directory, raised.value.trainer


@pytest.fixture(scope='module')
def resumed(tmp_path_factory):
    """Killed (SIGTERM's Preempted) at the end of epoch 2 of 3, then resumed with
    AutoResumeTrainConfig in the same directory; 'first-only' is put by the first attempt only.
    Returns the directory, what the tab showed after the first attempt, and the second trainer."""
    directory = str(tmp_path_factory.mktemp('resumed') / 'run')
    first = {1: {'val-error': 0.9, 'first-only': 5.0}, 2: {'val-error': 0.8}}
    with pytest.raises(Preempted):
        killer = Preempted('SIGTERM (test)')
        train(directory, lambda: [ModelSaver(), PutMetrics(first, fail_at=2, error=killer)], 3,
              {'params': {'attempt': 1}}, resume=True)
    after_kill = run_view(directory)
    second = {3: {'val-error': 0.7}}
    trainer = train(directory, lambda: [ModelSaver(), PutMetrics(second)], 3, {'params': {'attempt': 2}},
                    resume=True)
    return directory, after_kill, trainer


# ----- the tests --------------------------------------------------------------------------------

def test_finished_run_shows_parameters_metrics_and_success(finished):
    directory, trainer = finished
    experiment, group, session = run_view(directory)

    # the parameters: the trainer's and the TrainConfig's settings, then the user's, with their types
    shown = hparam_values(group)
    assert shown == run_parameters(trainer, PARAMS)
    assert {name: shown[name] for name in PARAMS} == {
        'lr': 0.3, 'depth': 18, 'augment': True, 'arch': 'line', 'seed': 7}
    assert (shown['trainer'], shown['max_epoch'], shown['steps_per_epoch']) == ('SimpleTrainer', 2, STEPS)
    kinds = {name: value.WhichOneof('kind') for name, value in group.hparams.items()}
    assert (kinds['augment'], kinds['depth'], kinds['lr'], kinds['arch']) == (
        'bool_value', 'number_value', 'number_value', 'string_value')
    types = {info.name: api_pb2.DataType.Name(info.type) for info in experiment.hparam_infos}
    assert set(types) == set(shown)
    assert (types['augment'], types['depth'], types['arch']) == (
        'DATA_TYPE_BOOL', 'DATA_TYPE_FLOAT64', 'DATA_TYPE_STRING')

    # metrics=None: every scalar put, with its last value (stats.json's) at the last global step;
    # the step-time monitor's (a default callback) among them, whose values are measured times
    tags = sorted(m.name.tag for m in experiment.metric_infos)
    assert [tag for tag in tags if not tag.startswith(TIMING_PREFIX)] == ['cost', 'val-error']
    assert 'StepTime/step_ms' in tags
    assert {name: value for name, (_, value) in metric_values(session).items()} == {
        name: value for name, (_, value) in last_in_stats(directory).items()}
    measured = {name: value for name, value in metric_values(session).items()
                if not name.startswith(TIMING_PREFIX)}
    assert measured == {'val-error': (2 * STEPS, 0.25), 'cost': (2 * STEPS, 2.0)}

    assert api_pb2.Status.Name(session.status) == 'STATUS_SUCCESS'
    assert session.start_time_secs <= session.end_time_secs
    assert len(hparams_files(directory)) == 1


def test_finished_run_plugin_data_read_by_the_hparams_parsers(finished):
    """The same run, one level down: the event file's hparams plugin data, as TensorBoard's
    event accumulator keeps it, parsed by the plugin's metadata functions."""
    directory, _ = finished
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRun(directory)
    multiplexer.Reload()
    content = multiplexer.PluginRunToTagToContent(metadata.PLUGIN_NAME)[directory]
    assert sorted(content) == sorted([metadata.EXPERIMENT_TAG, metadata.SESSION_START_INFO_TAG,
                                      metadata.SESSION_END_INFO_TAG])
    experiment = metadata.parse_experiment_plugin_data(content[metadata.EXPERIMENT_TAG])
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    assert sorted(info.name for info in experiment.hparam_infos) == sorted(start.hparams)
    assert start.hparams['lr'].number_value == 0.3
    assert len(start.group_name) == 64            # TensorBoard's default: a hash of the parameters
    assert end.status == api_pb2.STATUS_SUCCESS and end.end_time_secs >= start.start_time_secs


def test_failure_in_a_callback_ends_the_session_as_failure(failed, log_records):
    directory, trainer = failed
    experiment, group, session = run_view(directory)
    assert api_pb2.Status.Name(session.status) == 'STATUS_FAILURE'
    assert group.name == 'trial-7'
    assert hparam_values(group)['lr'] == 0.1
    # the listed metrics, in the config written before training; 'other' is not one
    assert [m.name.tag for m in experiment.metric_infos] == ['val-error', 'never-put']
    assert metric_values(session) == {'val-error': last_in_stats(directory)['val-error']}
    assert metric_values(session)['val-error'] == (2 * STEPS, float(np.float32(0.4)))
    assert trainer.loop.failure is not None


def test_killed_then_resumed_run_is_one_session_with_the_final_status(resumed):
    directory, (_, _, killed), trainer = resumed
    # after the kill: a session that did not end (TensorBoard has no 'killed')
    assert api_pb2.Status.Name(killed.status) == 'STATUS_UNKNOWN'
    assert metric_values(killed) == {'val-error': (2 * STEPS, float(np.float32(0.8))),
                                     'first-only': (2 * STEPS, 5.0)}

    experiment, group, session = run_view(directory)
    assert trainer.loop.starting_epoch == 3                           # it did resume
    assert api_pb2.Status.Name(session.status) == 'STATUS_SUCCESS'
    assert hparam_values(group)['attempt'] == 2                        # the last attempt's parameters
    assert session.start_time_secs == killed.start_time_secs           # when the run started
    assert sorted(m.name.tag for m in experiment.metric_infos) == ['first-only', 'val-error']
    final = metric_values(session)
    assert final['val-error'] == (3 * STEPS, float(np.float32(0.7)))
    assert final['val-error'] == last_in_stats(directory)['val-error']
    assert final['first-only'][1] == last_in_stats(directory)['first-only'][1] == 5.0
    assert len(hparams_files(directory)) == 1                          # the first attempt's file replaced
    # TensorBoard reads the files in name order: this monitor's last, or the earlier steps of the
    # TFEventWriter's would purge the final values written at the last step
    names = sorted(os.path.basename(path) for path in glob.glob(os.path.join(directory, 'events.out.*')))
    assert names[-1].endswith('.hparams') and len(names) == 3


def test_without_a_logger_directory_it_is_a_noop(log_records):
    monitor = TensorBoardHParams({'lr': 0.1})
    assert isinstance(monitor, NoOpMonitor) and str(monitor) == 'NoOpMonitor(TensorBoardHParams)'
    assert any('TensorBoardHParams is replaced by a NoOpMonitor' in message
               for message in log_records.messages_at(logging.WARNING))


@pytest.mark.parametrize('kwargs, error, match', [
    ({'params': [('lr', 0.1)]}, TypeError, 'params must be a dict'),
    ({'metrics': 'val-error'}, TypeError, 'metrics must be a list'),
    ({'metrics': ['val-error', 3]}, TypeError, 'metrics must be a list'),
    ({'trial_id': 7}, TypeError, 'trial_id'),
    ({'logdir': '/nonexistent/hparams'}, ValueError, 'not an existing directory'),
])
def test_argument_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        TensorBoardHParams(**kwargs)
