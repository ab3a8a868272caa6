"""The monitor interface and ``trainer.monitors``: where training statistics are published.

Callbacks and trainers publish through ``trainer.monitors``::

    self.trainer.monitors.put_scalar('val-error', 0.03)

and every registered :class:`MonitorBase` receives it. :class:`Monitors` also remembers the
history of every scalar (``get_latest``, ``get_history``).
"""

import re
import time
from collections import defaultdict

import numpy as np

from ...compat import tfv1
from ...loop.callback import Callback
from ...tfutils.summary import create_image_summary, create_scalar_summary

__all__ = ['MonitorBase', 'NoOpMonitor', 'Monitors', 'summary_scalar_name']


_TOWER_PREFIX = re.compile(r'tower[0-9]+/')
_SUMMARY_SUFFIX = '-summary'


def summary_scalar_name(tag):
    """The name under which :meth:`Monitors.put_summary` puts the scalar summary ``tag``:
    the tag without tower prefixes and without a ``-summary`` suffix.

    Example::

        summary_scalar_name('tower0/cost-summary')   # 'cost'
    """
    name = _TOWER_PREFIX.sub('', tag)
    return name[:-len(_SUMMARY_SUFFIX)] if name.endswith(_SUMMARY_SUFFIX) else name


class MonitorBase(Callback):
    """A callback that also receives data put into ``trainer.monitors``.

    Override the ``process*`` methods for the kinds of data the monitor handles.
    """

    _chief_only = False

    def setup_graph(self, trainer):
        # Monitors build no ops, so no name scope is opened.
        self.trainer = trainer
        self.graph = tfv1.get_default_graph()
        self._setup_graph()

    def process_summary(self, summary):
        """Receive a ``tf.compat.v1.Summary`` proto."""

    def process(self, name, value):
        """Receive any other named data (e.g. text or a dict)."""

    def process_scalar(self, name, value):
        """Receive a scalar (a Python int or float)."""

    def process_image(self, name, value):
        """Receive images: an NHWC uint8 array."""

    def process_event(self, event):
        """Receive a ``tf.compat.v1.Event`` proto."""


class NoOpMonitor(MonitorBase):
    """A monitor that ignores everything: stands in for one that cannot work here."""

    def __init__(self, name=None):
        self._name = name

    def __str__(self):
        return "NoOpMonitor({})".format(self._name) if self._name else "NoOpMonitor"


class ScalarHistory(MonitorBase):
    """Keeps the scalars put, as ``(global_step, value)`` pairs: one per name and step, the
    last one put (as ``stats.json`` and the TensorBoard event files do)."""

    def _setup_graph(self):
        self._history = defaultdict(list)

    def process_scalar(self, name, value):
        history = self._history[name]
        point = (self.global_step, float(value))
        if history and history[-1][0] == point[0]:
            history[-1] = point
        else:
            history.append(point)

    def get_latest(self, name):
        history = self._history.get(name)
        if not history:
            raise KeyError("No scalar named '{}' was put into the monitors yet.".format(name))
        return history[-1]

    def get_history(self, name):
        return self._history[name]


def _to_nhwc(images):
    images = np.asarray(images)
    if images.ndim == 2:
        return images[np.newaxis, :, :, np.newaxis]
    if images.ndim == 3:
        # HWC with a channel axis of 1/3/4, otherwise NHW
        return images[np.newaxis] if images.shape[-1] in (1, 3, 4) else images[..., np.newaxis]
    if images.ndim == 4:
        return images
    raise ValueError("An image must be HW, HWC, NHW or NHWC, got shape {}".format(images.shape))


class Monitors(Callback):
    """Dispatches everything put into it to all monitors; keeps the scalar history.

    A trainer owns one, ``trainer.monitors``, created by ``setup_callbacks``.
    """

    _chief_only = False

    def __init__(self, monitors):
        for m in monitors:
            if not isinstance(m, MonitorBase):
                raise TypeError("Monitors takes MonitorBase instances, got {!r} of type {}".format(
                    m, type(m).__name__))
        self._scalar_history = ScalarHistory()
        self._monitors = list(monitors) + [self._scalar_history]

    def _setup_graph(self):
        # The other monitors are registered to the trainer as callbacks of their own.
        self._scalar_history.setup_graph(self.trainer)

    def _dispatch(self, method, *args):
        for m in self._monitors:
            getattr(m, method)(*args)

    def put_summary(self, summary):
        """Put a ``Summary`` proto (or its serialized bytes). Its scalar values are also put as
        scalars, with tower prefixes (``tower0/``) and a ``-summary`` suffix removed."""
        if isinstance(summary, bytes):
            summary = tfv1.Summary.FromString(summary)
        if not isinstance(summary, tfv1.Summary):
            raise TypeError("put_summary() takes a tf.compat.v1.Summary, got {}".format(type(summary)))
        for value in summary.value:
            if value.WhichOneof('value') == 'simple_value':
                value.tag = summary_scalar_name(value.tag)
                self._dispatch('process_scalar', value.tag, value.simple_value)
        self._dispatch('process_summary', summary)

    def put_scalar(self, name, value):
        """Put a scalar; numpy scalars become Python numbers."""
        if isinstance(value, np.floating):
            value = float(value)
        elif isinstance(value, np.integer):
            value = int(value)
        elif isinstance(value, np.ndarray):
            if value.size != 1:
                raise ValueError("put_scalar('{}') got an array of shape {}".format(name, value.shape))
            value = value.item()
        self._dispatch('process_scalar', name, value)
        self._dispatch('process_summary', create_scalar_summary(name, value))

    def put_image(self, name, images):
        """Put images (HW, HWC, NHW or NHWC, values in [0, 255])."""
        images = _to_nhwc(images)
        self._dispatch('process_image', name, images)
        self._dispatch('process_summary', create_image_summary(name, images))

    def put_event(self, event):
        """Put a ``tf.compat.v1.Event``; its step and wall time are set here."""
        event.step = self.global_step
        event.wall_time = time.time()
        self._dispatch('process_event', event)

    def get_latest(self, name):
        """The latest value of scalar ``name``; KeyError when it was never put."""
        return self._scalar_history.get_latest(name)[1]

    def get_history(self, name):
        """The ``(global_step, value)`` pairs put for scalar ``name``, oldest first: one per
        global step (the last value put at that step)."""
        return self._scalar_history.get_history(name)
