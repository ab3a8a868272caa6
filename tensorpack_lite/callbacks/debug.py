"""Callbacks that write tensor values to the logger directory after every epoch, for
debugging and inspection.

* :class:`DumpTensors` (also named ``DumpTensor``) saves named tensors to
  ``DumpTensor-<global_step>.npz``.
* :class:`DumpTensorAsImage` saves a tensor holding an image (or a batch of them) as PNG files.
* :class:`DumpParamAsImage` does the same for a variable.

How values are obtained: variables are read after the epoch by a ``sess.run`` of their own,
so a dump holds the values after the epoch's last update. Every other tensor is fetched
along with the last step of the epoch (it may depend on that step's input, which cannot be
fed again). When one of these callbacks is triggered elsewhere than at the end of an epoch
(e.g. wrapped in ``PeriodicTrigger(every_k_steps=...)``), such tensors are computed by a
separate ``sess.run``, which fails for tensors that need a feed and takes an extra datapoint
from a queue-based input; a warning says so once.
"""

import os

import numpy as np

from ..compat import tf, tfv1
from ..loop.callback import Callback
from ..tfutils.common import check_tensor_names, get_op_tensor_name
from ..tfutils.summary import encode_png
from ..tfutils.varmanip import variable_of_tensor
from ..utils import logger
from ..utils.argtools import log_once
from ..utils.fs import write_atomically

__all__ = ['DumpTensors', 'DumpTensor', 'DumpTensorAsImage', 'DumpParamAsImage']


def _require_logger_dir(owner):
    path = logger.get_logger_dir()
    if path is None:
        raise RuntimeError("{} writes into the logger directory, which is not set: call "
                           "logger.set_logger_dir() before training.".format(owner))
    return path


class _EpochEndValues(Callback):
    """Base class: obtains the values of ``self._names`` when triggered (see the module
    docstring for how). Subclasses use :meth:`_get_values` in ``_trigger``."""

    def _setup_graph(self):
        self._log_dir = _require_logger_dir(self)
        found = self.get_tensors_maybe_in_tower(self._names)
        self._variables = {}   # index -> tf.Variable, read after the epoch
        self._tensors = {}     # index -> tf.Tensor, fetched with the epoch's last step
        for index, (name, thing) in enumerate(zip(self._names, found)):
            if not isinstance(thing, tf.Tensor):
                raise TypeError("{}: '{}' names an op, not a tensor; give a tensor name such as "
                                "'{}:0'.".format(self, name, thing.name))
            var = variable_of_tensor(thing)
            if var is not None:
                self._variables[index] = var
            elif thing.dtype == tf.resource:
                raise TypeError("{}: '{}' is a resource handle but not a known variable; give "
                                "the name of a variable or a tensor.".format(self, name))
            else:
                self._tensors[index] = thing
        self._check_found()
        self._fetch = None
        if self._tensors:
            self._fetch = tfv1.train.SessionRunArgs(fetches=list(self._tensors.values()))
        self._fetched = None

    def _check_found(self):
        """Subclasses may reject some of the tensors found."""

    def _before_run(self, _):
        # fetch once, with the first hooked run of the last step of the epoch
        loop = self.trainer.loop
        if self._fetch is None or not (loop.is_last_step_of_epoch and loop.is_first_run_of_step):
            return None
        return self._fetch

    def _after_run(self, _, run_values):
        if run_values.results is not None:
            self._fetched = (self.epoch_num, run_values.results)

    def _fetched_this_step(self):
        """The values fetched with the current step, if it is the last of its epoch."""
        if self._fetched is None or not self.trainer.loop.is_last_step_of_epoch:
            return None
        epoch, values = self._fetched
        return values if epoch == self.epoch_num else None

    def _get_values(self):
        """The values of the names, in order."""
        values = [None] * len(self._names)
        if self._tensors:
            fetched = self._fetched_this_step()
            if fetched is None:
                log_once("{} was triggered elsewhere than at the end of an epoch: its tensors {} "
                         "are computed by a separate session run.".format(
                             self, [self._names[i] for i in self._tensors]), 'warn')
                fetched = self.trainer.sess.run(list(self._tensors.values()))
            for index, value in zip(self._tensors, fetched):
                values[index] = value
        if self._variables:
            read = self.trainer.sess.run(list(self._variables.values()))
            for index, value in zip(self._variables, read):
                values[index] = value
        return values


class DumpTensors(_EpochEndValues):
    """After every epoch, save the values of some tensors to
    ``<logger_dir>/DumpTensor-<global_step>.npz``, keyed by the given names.

    Read a dump back with ``dict(np.load(path))``. The file is written to a temporary name
    and renamed, so it is always complete.

    Example::

        DumpTensors(['cost', 'fc0/W'])
        # after epoch 1 of 100 steps: train_log/x/DumpTensor-100.npz with keys 'cost', 'fc0/W'
    """

    def __init__(self, names):
        """
        Args:
            names (list[str]): names of tensors or variables (``'fc0/W'`` or ``'fc0/W:0'``);
                a name not in the graph is looked up in the first training tower.
        """
        self._names = check_tensor_names(names, 'DumpTensors', empty=False)
        self.last_dump = None
        """The path of the latest dump."""

    def _trigger(self):
        values = self._get_values()
        path = os.path.join(self._log_dir, 'DumpTensor-{}.npz'.format(self.global_step))
        write_atomically(path, lambda f: np.savez(f, **dict(zip(self._names, values))))
        self.last_dump = path


DumpTensor = DumpTensors
"""The other name tensorpack gives :class:`DumpTensors`."""


def _split_images(value, owner):
    """A list of HxW or HxWxC images from what ``map_func`` returned: a list of images, an
    NHWC batch, an NHW batch (3 dims, the last not 1, 3 or 4), or one HW/HWC image."""
    if isinstance(value, (list, tuple)):
        images, batch = [np.asarray(v) for v in value], True
    else:
        value = np.asarray(value)
        if value.ndim == 4 or (value.ndim == 3 and value.shape[-1] not in (1, 3, 4)):
            images, batch = list(value), True
        else:
            images, batch = [value], False
    for image in images:
        if image.ndim not in (2, 3) or (image.ndim == 3 and image.shape[-1] not in (1, 3, 4)):
            raise ValueError("{}: cannot write an image of shape {}: expected HW, HWC (C = 1, 3 "
                             "or 4), a batch of them, or a list; use map_func to convert.".format(
                                 owner, image.shape))
    return images, batch


class DumpTensorAsImage(_EpochEndValues):
    """After every epoch, save a tensor holding an image, or a batch of images, as PNG files
    in the logger directory, and put the images into ``trainer.monitors``.

    The pixel values are ``map_func(value) * scale`` rounded and clipped to [0, 255]; with
    the default scale, values in [0, 1] map to the full range. Files are named
    ``<prefix>-ep<epoch, 3 digits>.png`` for one image and ``<prefix>-ep<epoch>-<index>.png``
    for each image of a batch. Channels are written in the array's order (RGB / RGBA), not
    OpenCV's BGR.

    Example::

        DumpTensorAsImage('generated', map_func=lambda x: x[:4])   # the first 4 of a batch
        # train_log/x/generated-ep001-0.png ... generated-ep001-3.png
    """

    _clip = True

    def __init__(self, tensor_name, prefix=None, map_func=None, scale=255):
        """
        Args:
            tensor_name (str): the tensor (looked up in the first training tower when not in
                the graph).
            prefix (str): the start of the file names and the monitor tag; defaults to the
                op name with ``'/'`` replaced by ``'_'``.
            map_func: maps the value to an image (HW or HWC with 1, 3 or 4 channels), an NHWC
                or NHW batch, or a list of images. Identity when None.
            scale (float): multiplies the pixel values, after ``map_func``.
        """
        if not isinstance(tensor_name, str) or not tensor_name:
            raise TypeError("{}: tensor_name must be a non-empty str, got {!r}".format(
                type(self).__name__, tensor_name))
        if map_func is not None and not callable(map_func):
            raise TypeError("{}: map_func must be callable, got {!r}".format(
                type(self).__name__, map_func))
        if prefix is None:
            prefix = get_op_tensor_name(tensor_name)[0].replace('/', '_')
        if not isinstance(prefix, str) or not prefix or os.sep in prefix:
            raise ValueError("{}: prefix must be a non-empty file name prefix without '{}', got "
                             "{!r}".format(type(self).__name__, os.sep, prefix))
        self._names = [tensor_name]
        self.prefix = prefix
        self.map_func = map_func
        self.scale = float(scale)
        self.last_files = []
        """The paths of the PNG files of the latest dump."""

    def _trigger(self):
        value, = self._get_values()
        if self.map_func is not None:
            value = self.map_func(value)
        images, batch = _split_images(value, self)
        pixels = [self._to_pixels(image) for image in images]
        self.last_files = []
        for index, image in enumerate(pixels):
            suffix = '-{}'.format(index) if batch else ''
            path = os.path.join(self._log_dir, '{}-ep{:03d}{}.png'.format(
                self.prefix, self.epoch_num, suffix))
            if image.ndim == 2:
                image = image[:, :, np.newaxis]
            encoded = encode_png(np.ascontiguousarray(image))
            write_atomically(path, lambda f: f.write(encoded))
            self.last_files.append(path)
        if len({p.shape for p in pixels}) == 1:
            self.trainer.monitors.put_image(self.prefix, np.stack(pixels) if batch else pixels[0])
        else:
            for index, image in enumerate(pixels):
                self.trainer.monitors.put_image('{}/{}'.format(self.prefix, index), image)

    def _to_pixels(self, image):
        values = image.astype(np.float64) * self.scale
        if not np.all(np.isfinite(values)):
            raise ValueError("{}: the image has non-finite values (NaN or inf).".format(self))
        if not self._clip and values.size and (values.min() < -0.5 or values.max() >= 255.5):
            raise ValueError("{}: pixel values (after map_func and scale={}) range over [{:g}, "
                             "{:g}], outside [0, 255]; pass clip=True or a map_func that "
                             "normalizes them.".format(self, self.scale, values.min(), values.max()))
        return np.clip(np.rint(values), 0, 255).astype(np.uint8)

    def __str__(self):
        return '{}({})'.format(type(self).__name__, self._names[0])


class DumpParamAsImage(DumpTensorAsImage):
    """:class:`DumpTensorAsImage` for a variable (e.g. the filters of a convolution), read
    after every epoch.

    Example::

        DumpParamAsImage('conv0/W', map_func=lambda w: w.transpose(3, 0, 1, 2)[..., :1],
                         scale=127, clip=True)
    """

    def __init__(self, tensor_name, prefix=None, map_func=None, scale=255, clip=False):
        """
        Args:
            tensor_name (str): the name of the variable (or of its tensor, ``'conv0/W:0'``).
            prefix, map_func, scale: see :class:`DumpTensorAsImage`.
            clip (bool): clip pixel values outside [0, 255]. When False such values are an
                error (instead of wrapping around).
        """
        super(DumpParamAsImage, self).__init__(tensor_name, prefix, map_func, scale)
        self._clip = bool(clip)

    def _check_found(self):
        if not self._variables:
            raise TypeError("{}: '{}' is not a variable; use DumpTensorAsImage for other "
                            "tensors.".format(self, self._names[0]))
