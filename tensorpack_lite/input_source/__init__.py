"""Input sources: how data reaches the trainer's graph."""

from .input_source import (BatchQueueInput, DummyConstantInput, FeedInput, PlaceholderInput,
                           QueueInput, StagingInput, TensorInput, TFDatasetInput, ZMQInput)
from .input_source_base import FeedfreeInput, InputSource, ProxyInputSource, remap_input_source

__all__ = ['InputSource', 'PlaceholderInput', 'FeedInput', 'FeedfreeInput', 'QueueInput',
           'BatchQueueInput', 'TensorInput', 'DummyConstantInput', 'ZMQInput', 'TFDatasetInput',
           'StagingInput', 'ProxyInputSource', 'remap_input_source']
