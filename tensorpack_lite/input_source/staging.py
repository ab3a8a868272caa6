"""StagingInput: prefetch the tensors of another feed-free source into staging areas (e.g. on
the GPU), one step ahead."""

import contextlib
from itertools import chain

from ..compat import tf, tf_internal, tfv1
from ..loop.callback import Callback
from ..tfutils.dependency import dependency_of_fetches
from ..utils import logger
from .input_source_base import FeedfreeInput

__all__ = ['StagingInput']


def _maybe_device(device):
    """``tf.device(device)``, or no change of device when it is None."""
    return tf.device(device) if device is not None else contextlib.nullcontext()


class StagingInput(FeedfreeInput):
    """Prefetch the tensors of another feed-free source into a ``StagingArea`` (e.g. on the
    GPU), so that each step consumes data that was staged during the previous one.

    Before the first step ``nr_stage`` elements are put into every area; then every hooked
    run that consumes the inputs also stages the next element.

    Args:
        input (FeedfreeInput): the source to prefetch from (not a StagingInput).
        nr_stage (int): elements staged ahead.
        device (str): where the staging areas live; by default the device in effect where
            :meth:`get_input_tensors` is called (each tower's device in data-parallel training).

    Example::

        source = StagingInput(QueueInput(df), nr_stage=1)
    """

    class StagingCallback(Callback):
        """Fills the staging areas before the first step, then stages one more element with
        every run that consumes one; empties them after training."""

        _chief_only = False

        def __init__(self, source, nr_stage):
            self._source = source
            self.nr_stage = nr_stage
            self._prefilled = False

        def _setup_graph(self):
            self.stage_op = self._source._get_stage_op()
            unstage_ops = self._source._get_unstage_ops()
            if not unstage_ops:
                raise RuntimeError("StagingInput: get_input_tensors() was never called, so "
                                   "there is nothing to stage")
            self._check_dependency_op = unstage_ops[0].op
            self.fetches = tfv1.train.SessionRunArgs(
                fetches=[self.stage_op, tf.group(*unstage_ops, name='unstage_all')])
            self._clear_ops = [area.clear() for area in self._source._areas]

        def _prefill(self, sess):
            logger.info("Pre-filling StagingArea ...")
            for _ in range(self.nr_stage):
                sess.run(self.stage_op)
            logger.info("{} element(s) put into each StagingArea.".format(self.nr_stage))

        def _consumes_input(self, ctx):
            return dependency_of_fetches(ctx.original_args.fetches, self._check_dependency_op)

        def _before_run(self, ctx):
            # Not in before_train: the source's own callbacks (e.g. starting a queue's thread)
            # must have run first.
            if not self._prefilled:
                self._prefilled = True
                self._prefill(ctx.session)
            if self._consumes_input(ctx):
                return self.fetches
            return None

        def _after_train(self):
            if not self.session_usable("emptying the staging areas"):
                return
            try:
                self.trainer.sess.run(self._clear_ops)
            except Exception as err:
                logger.warn("StagingInput: could not empty the staging areas: {}".format(err))

    def __init__(self, input, nr_stage=1, device=None):
        if not isinstance(input, FeedfreeInput):
            raise TypeError("StagingInput only wraps a FeedfreeInput, got {!r}".format(input))
        if isinstance(input, StagingInput):
            raise TypeError("StagingInput cannot wrap another StagingInput")
        nr_stage = int(nr_stage)
        if nr_stage <= 0:
            raise ValueError("StagingInput: nr_stage must be positive, got {}".format(nr_stage))
        self._input = input
        self._nr_stage = nr_stage
        self._device = device
        self._areas = []
        self._area_sizes = []
        self._stage_ops = []
        self._unstage_ops = []
        input.reports_position = False    # what it gives is staged ahead: this source reports

    def _setup(self, input_signature):
        self._input.setup(input_signature)
        with self.cached_name_scope():
            pass  # fixes the name scope to use later

    def _get_callbacks(self):
        # The staging callback comes after the wrapped source's own callbacks.
        return self._input.get_callbacks() + [StagingInput.StagingCallback(self, self._nr_stage)]

    def _size(self):
        return self._input.size()

    def _get_state(self, held_back):
        """The wrapped source's position, without what the staging areas hold (elements
        taken from it that training has not consumed)."""
        staged = sum(int(n) for n in tfv1.get_default_session().run(self._area_sizes))
        return self._input.get_state(held_back + staged)

    def _set_state(self, state):
        self._input.set_state(state)

    def _get_input_tensors(self):
        StagingArea = tf_internal('python.ops.data_flow_ops').StagingArea
        inputs = self._input.get_input_tensors()
        with self.cached_name_scope():
            with _maybe_device(self._device):
                area = StagingArea([t.dtype.base_dtype for t in inputs], shapes=None)
                self._stage_ops.append(area.put(inputs))
                outputs = area.get()
                self._area_sizes.append(area.size())
            self._areas.append(area)
            if isinstance(outputs, tf.Tensor):
                outputs = [outputs]
            outputs = list(outputs)
            for vin, vout in zip(inputs, outputs):
                vout.set_shape(vin.shape)
            self._unstage_ops.append(outputs)
            return outputs

    def _get_stage_op(self):
        with self.cached_name_scope():
            return tf.group(*self._stage_ops)

    def _get_unstage_ops(self):
        return list(chain.from_iterable(self._unstage_ops))
