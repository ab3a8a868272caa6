"""Monitors that send the statistics out of the process: to a command
(:class:`SendMonitorData`) or to comet.ml (:class:`CometMLMonitor`)."""

import string
import subprocess

from ...libinfo import __version__
from ...utils import logger
from ...utils.develop import import_optional
from .group import MonitorBase

__all__ = ['SendMonitorData', 'CometMLMonitor']


class SendMonitorData(MonitorBase):
    """Runs a shell command once every scalar in ``names`` has a new value, e.g. to send
    them to a phone or a chat. The values are substituted with ``command.format(**values)``.
    A failing command is logged with its return code; training goes on.

    Args:
        command (str): a shell command with ``{name}`` placeholders.
        names (str or list[str]): the scalars to wait for.

    Example::

        SendMonitorData('curl -s "https://example.com/?err={val-error:.4f}"', ['val-error'])
    """

    def __init__(self, command, names):
        if not isinstance(command, str):
            raise TypeError("SendMonitorData: command must be a str, got {!r}".format(command))
        if isinstance(names, str):
            names = [names]
        names = list(names)
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError("SendMonitorData: names must be a non-empty list of scalar names, "
                             "got {!r}".format(names))
        used = {field.split('.')[0].split('[')[0]
                for _, field, _, _ in string.Formatter().parse(command) if field is not None}
        unknown = sorted(used - set(names))
        if unknown:
            raise ValueError("SendMonitorData: command {!r} uses {} which are not in names={}".format(
                command, unknown, names))
        self.command = command
        self.names = names
        self._values = {}
        self.last_returncode = None

    def process_scalar(self, name, value):
        if name in self.names:
            self._values[name] = value

    def _trigger_step(self):
        self._trigger()

    def _trigger(self):
        if any(name not in self._values for name in self.names):
            return
        cmd = self.command.format(**self._values)
        self._values = {}
        ret = subprocess.run(cmd, shell=True).returncode
        self.last_returncode = ret
        if ret != 0:
            logger.error("SendMonitorData: command '{}' failed with return code {}.".format(cmd, ret))


class CometMLMonitor(MonitorBase):
    """Sends the scalars and images put into the monitors, and the graph, to an experiment
    of comet.ml (``comet_ml.Experiment``).

    Scalars are logged at the trainer's global step, images as JPEG named
    ``<name>_step<global step>`` (``_<index>`` appended for each image of a batch); the end
    of every epoch is logged, and the experiment is ended after training.

    comet_ml is needed only to create the experiment here (when ``experiment`` is None); it
    asks to be imported before TensorFlow. Its automatic capture of the terminal output is
    off by default here, because it makes the progress bar look frozen.

    Example::

        import comet_ml   # first
        CometMLMonitor(project_name='mnist', tags=['baseline'])
        # or with an experiment of your own:
        CometMLMonitor(experiment=comet_ml.Experiment(project_name='mnist'))
    """

    def __init__(self, experiment=None, tags=None, **kwargs):
        """
        Args:
            experiment (comet_ml.Experiment): the experiment to send to; ``tags`` and
                ``kwargs`` must then be left out.
            tags (list[str]): tags of the experiment created here.
            kwargs: arguments of ``comet_ml.Experiment`` (project name, API key...).
        """
        if experiment is not None:
            if tags is not None or kwargs:
                raise ValueError("CometMLMonitor: tags and Experiment arguments only apply to an experiment "
                                 "created here; with experiment= given, got tags={!r} and {}".format(
                                     tags, sorted(kwargs)))
            self._exp = experiment
        else:
            comet_ml = import_optional('comet_ml', purpose='CometMLMonitor (without an experiment given)')
            kwargs.setdefault('log_code', True)
            kwargs.setdefault('auto_output_logging', None)
            self._exp = comet_ml.Experiment(**kwargs)
            if tags is not None:
                self._exp.add_tags(list(tags))
        self._exp.log_dependency('tensorpack_lite', __version__)

    @property
    def experiment(self):
        """The ``comet_ml.Experiment`` the data goes to."""
        return self._exp

    def _before_train(self):
        self._exp.set_model_graph(self.graph)

    def process_scalar(self, name, value):
        self._exp.log_metric(name, value, step=self.global_step)

    def process_image(self, name, value):
        self._exp.set_step(self.global_step)
        for index, image in enumerate(value):
            suffix = '_{}'.format(index) if len(value) > 1 else ''
            self._exp.log_image(image, name='{}_step{}{}'.format(name, self.global_step, suffix),
                                image_format='jpeg', image_minmax=(0, 255))

    def _after_epoch(self):
        self._exp.log_epoch_end(self.epoch_num)

    def _after_train(self):
        self._exp.end()
