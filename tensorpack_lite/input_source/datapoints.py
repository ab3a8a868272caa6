"""Datapoints of a DataFlow as feeds of placeholders: the one check that a datapoint fits the
inputs (with an error naming the component and the input), and the early closing of the
iterator that produced it. Used by :class:`FeedInput`, the queue-filling thread (QueueInput,
BatchQueueInput, ZMQInput) and ``TFDatasetInput.dataflow_to_dataset``.

A datapoint is a list (or tuple) with one component per input, in the inputs' order, or a
dict keyed by input name (as tensorpack's InputSources accept): its keys must be exactly the
inputs' names. A missing key and an extra key are errors naming the key and the InputSource
(tensorpack raises on both too: its length check catches extra keys)."""

import numpy as np

from ..compat import tf
from ..session.hooked_session import CheckedFeeds

__all__ = ['DatapointChecker', 'close_iterator', 'input_name', 'datapoint_as_list']


def input_name(tensor_or_spec):
    return tensor_or_spec.name.split(':')[0]


def datapoint_as_list(owner, dp, names):
    """The components of datapoint ``dp`` in the order of the inputs ``names``: a list or tuple
    as it is, a dict by its keys (which must be exactly ``names``). Anything else, a missing
    key or an extra key raises an error naming ``owner`` (the InputSource) and the key."""
    if isinstance(dp, (list, tuple)):
        return dp
    if isinstance(dp, dict):
        missing = [name for name in names if name not in dp]
        if missing:
            raise KeyError("{}: the datapoint (a dict) has no key for input '{}' (its keys: {})".format(
                owner, missing[0], ', '.join(map(str, dp))))
        if len(dp) != len(names):
            known = set(names)
            extra = [key for key in dp if key not in known]
            raise KeyError("{}: the datapoint (a dict) has key '{}', which is not an input (the inputs: "
                           "{})".format(owner, extra[0], ', '.join(names)))
        return [dp[name] for name in names]
    raise TypeError("{}: a datapoint must be a list of {} components (one per input) or a dict keyed "
                    "by input name, got {}".format(owner, len(names), type(dp).__name__))


# numpy kinds a value may have for each kind of input when it is converted on feeding:
# bool, ints and floats widen losslessly in meaning; floats go into ints only when every value is
# a whole number the input can hold (checked per datapoint: 0./1. edge maps into an int32 input,
# as tensorpack's HED example feeds them, but never 0.5); nothing but bools goes into bools.
_ACCEPTED_KINDS = {'b': 'b', 'i': 'biuf', 'u': 'buf', 'f': 'biuf', 'c': 'biufc'}


def _dtype_fits(dtype, expected, strict):
    """Whether values of numpy ``dtype`` may feed a TF input of dtype ``expected``: exactly
    equal when ``strict``, otherwise of a kind that converts without changing meaning."""
    if expected == tf.string:
        return dtype.kind in 'SUO'
    target = np.dtype(expected.as_numpy_dtype)
    if strict:
        return dtype == target
    accepted = _ACCEPTED_KINDS.get(target.kind)
    return accepted is None or dtype.kind in accepted  # e.g. bfloat16: left to TensorFlow


def _needs_value_check(dtype, target):
    """Whether values of numpy ``dtype`` may change on conversion to the integer ``target``:
    integers it cannot hold (int64 into int32, int8 into uint8...) would wrap around, floats
    would be truncated or wrap around."""
    if target.kind not in 'iu':
        return False
    return dtype.kind == 'f' or (dtype.kind in 'iu' and not np.can_cast(dtype, target, 'safe'))


def _not_whole(value):
    """The first element of the float array ``value`` that is not a whole number (a fraction,
    NaN or infinity), or None."""
    whole = np.isfinite(value) & (value == np.trunc(value))
    return None if whole.all() else value.ravel()[np.argmin(whole.ravel())]


def _out_of_range(value, target):
    """The first element of the array ``value`` (integers, or floats of whole numbers) that
    the integer ``target`` cannot hold, or None."""
    if value.size == 0:
        return None
    info = np.iinfo(target)
    low, high = value.min(), value.max()
    # as Python numbers: their comparison of a float with an int is exact (2.0**63 > 2**63 - 1)
    if low.item() < info.min:
        return low
    if high.item() > info.max:
        return high
    return None


class DatapointChecker:
    """Turns datapoints into feeds for ``placeholders``, with a clear error for one that does
    not fit: wrong number of components, a shape the placeholder does not accept, or a dtype
    that would change meaning when converted (floats into a bool input; with
    ``strict_dtype`` any other dtype), floats that are not whole numbers for an integer input
    (0.5 would silently become 0), or values out of the range of an integer input
    (2**33 + 3 fed to an int32 input would silently become 3). Runs once per datapoint, so
    it is kept cheap: the values are only looked at when the datapoint holds floats or
    integers of a wider dtype than the integer input's.

    The feeds are arrays of exactly the placeholders' dtypes, marked as checked
    (:class:`CheckedFeeds`), so that the hooked session feeds them without a second check.
    """

    def __init__(self, owner, placeholders, strict_dtype=False, names=None):
        self.owner = owner
        self.placeholders = list(placeholders)
        self.names = [input_name(p) for p in self.placeholders] if names is None else list(names)
        """The input names that the keys of dict datapoints are matched to."""
        self.strict_dtype = strict_dtype
        self._dims = [None if p.shape.rank is None else tuple(p.shape.as_list()) for p in placeholders]
        self._dtypes = [np.dtype(p.dtype.base_dtype.as_numpy_dtype) for p in placeholders]
        self._fits = {}  # (input index, numpy dtype) -> (fits, needs a range check)
        self._as_is = set()  # (input index, shape): arrays of exactly the input's dtype that pass as they are

    def feeds(self, dp):
        """The feed dict of datapoint ``dp`` (a list, or a dict keyed by input name), after
        checking it."""
        dp = datapoint_as_list(self.owner, dp, self.names)
        if len(dp) != len(self.placeholders):
            raise ValueError("{}: the datapoint has {} components but there are {} inputs ({})".format(
                self.owner, len(dp), len(self.placeholders),
                ', '.join(input_name(p) for p in self.placeholders)))
        return CheckedFeeds(zip(self.placeholders, map(self._checked_component, range(len(dp)), dp)))

    def _checked_component(self, index, value):
        """``value`` as an array of the input's dtype, after checking that it fits."""
        if type(value) is np.ndarray and value.dtype == self._dtypes[index] and \
                (index, value.shape) in self._as_is:
            return value   # of the input's very dtype, in a shape that fitted: nothing to check or convert
        placeholder = self.placeholders[index]
        if not isinstance(value, np.ndarray):
            try:
                value = np.asarray(value)
            except ValueError as err:  # e.g. a ragged nested list
                raise ValueError("{}: component {} of the datapoint, for input '{}', is not an "
                                 "array: {}".format(self.owner, index, input_name(placeholder),
                                                    err)) from None
        dims = self._dims[index]
        if dims is not None and (len(dims) != value.ndim or any(
                d is not None and d != v for d, v in zip(dims, value.shape))):
            raise ValueError("{}: component {} of the datapoint has shape {}, which does not fit "
                             "input '{}' of shape {}".format(
                                 self.owner, index, value.shape, input_name(placeholder), placeholder.shape))
        verdict = self._fits.get((index, value.dtype))
        if verdict is None:
            verdict = self._fits[(index, value.dtype)] = (
                _dtype_fits(value.dtype, placeholder.dtype.base_dtype, self.strict_dtype),
                placeholder.dtype.base_dtype != tf.string
                and _needs_value_check(value.dtype, self._dtypes[index]))
        fits, needs_value_check = verdict
        if not fits:
            raise TypeError("{}: component {} of the datapoint has dtype {}, but input '{}' is "
                            "{}".format(self.owner, index, value.dtype, input_name(placeholder),
                                        placeholder.dtype.base_dtype.name))
        if needs_value_check:
            self._check_values(index, value)
        elif value.dtype == self._dtypes[index] and type(value) is np.ndarray and len(self._as_is) < 1024:
            self._as_is.add((index, value.shape))
        if value.dtype != self._dtypes[index]:
            try:
                value = np.asarray(value, dtype=self._dtypes[index])
            except (TypeError, ValueError, OverflowError) as err:
                raise TypeError("{}: component {} of the datapoint ({}) cannot be converted to the "
                                "{} of input '{}': {}".format(
                                    self.owner, index, value.dtype, placeholder.dtype.base_dtype.name,
                                    input_name(placeholder), err)) from None
        return value

    def _check_values(self, index, value):
        """Raise if an element of ``value`` would change on conversion to the integer input
        ``index``: a float that is not a whole number, or a value out of the input's range."""
        placeholder, target = self.placeholders[index], self._dtypes[index]
        if value.dtype.kind == 'f':
            culprit = _not_whole(value)
            if culprit is not None:
                raise ValueError("{}: component {} of the datapoint ({}) holds {}, which is not a whole "
                                 "number, but input '{}' is {}".format(
                                     self.owner, index, value.dtype, culprit, input_name(placeholder),
                                     placeholder.dtype.base_dtype.name))
        culprit = _out_of_range(value, target)
        if culprit is not None:
            with np.errstate(invalid='ignore', over='ignore'):
                wrapped = np.array(culprit).astype(target)
            raise ValueError("{}: component {} of the datapoint holds {}, which does not fit "
                             "the {} of input '{}' (it would wrap around to {})".format(
                                 self.owner, index, culprit, placeholder.dtype.base_dtype.name,
                                 input_name(placeholder), wrapped))


def close_iterator(itr):
    """Finish a generator early, so that it releases what it holds (reentrancy guards,
    sockets...)."""
    close = getattr(itr, 'close', None)
    if close is not None:
        close()
