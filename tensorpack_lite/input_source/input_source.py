"""The InputSource implementations (tensorpack's path to them; each lives in a module of its
own): placeholders fed from Python, TF queues filled by a thread, tensors, constants, ZMQ,
``tf.data`` and staging areas.

Every source is used the same way by a trainer::

    callbacks = source.setup(input_signature)   # list of tf.TensorSpec
    tensors = source.get_input_tensors()        # once per tower
    # ... build the model on `tensors`, then train with `callbacks` registered.
"""

from .feed import FeedInput, PlaceholderInput
from .input_source_base import FeedfreeInput
from .queue import BatchQueueInput, QueueInput, ZMQInput
from .staging import StagingInput
from .tensors import DummyConstantInput, TensorInput, TFDatasetInput

__all__ = ['PlaceholderInput', 'FeedInput', 'QueueInput', 'BatchQueueInput', 'TensorInput',
           'DummyConstantInput', 'ZMQInput', 'TFDatasetInput', 'StagingInput', 'FeedfreeInput']
