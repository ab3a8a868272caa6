"""DataFlow: pure-Python data pipelines (no TensorFlow needed).

A DataFlow is a re-iterable producer of datapoints (lists or dicts of components).
Call ``reset_state()`` once, then iterate; each iteration is one epoch::

    from tensorpack_lite.dataflow import DataFromList, MapDataComponent, BatchData

    df = DataFromList([[i, i % 2] for i in range(100)], shuffle=True)
    df = MapDataComponent(df, lambda x: x * 2., index=0)
    df = BatchData(df, 32)
    df.reset_state()
    for x, y in df:   # x: float32 array of shape (32,), y: int32 array of shape (32,)
        ...
"""

from ..utils.develop import LazyModule
from . import dataset
from .base import DataFlow, DataFlowTerminated, ProxyDataFlow, RNGDataFlow
from .common import (BatchData, BatchDataByShape, CacheData, ConcatData, FixedSizeData, JoinData,
                     LocallyShuffleData, MapData, MapDataComponent, PrintData, RandomChooseData,
                     RandomMixData, RepeatedData, RepeatedDataPoint, SelectComponent, TestDataSpeed)
from .format import CaffeLMDB, HDF5Data, LMDBData, LMDBDataDecoder, SVMLightData
from .image import AugmentImageComponent, AugmentImageComponents, AugmentImageCoordinates, ImageFromFile
from .parallel import (DataFlowWorkerError, MultiProcessPrefetchData, MultiProcessRunner,
                       MultiProcessRunnerZMQ, MultiThreadPrefetchData, MultiThreadRunner, PrefetchData,
                       PrefetchDataZMQ)
from .parallel_map import (MultiProcessMapAndBatchData, MultiProcessMapAndBatchDataZMQ,
                           MultiProcessMapData,
                           MultiProcessMapDataZMQ, MultiThreadMapData)
from .raw import DataFromGenerator, DataFromIterable, DataFromList, DataFromQueue, FakeData
from .remote import RemoteDataZMQ, send_dataflow_zmq
from .serialize import (HDF5Serializer, LMDBSerializer, MsgpackSerializer, NumpySerializer,
                        TFRecordSerializer)
from .shards import GlobalOrder, ShardedData, ShardError, save_shards

# Image augmentation needs OpenCV (the 'image' extra): imported when first used.
imgaug = LazyModule('tensorpack_lite.dataflow.imgaug')

__all__ = ['dataset', 'imgaug', 'DataFlow', 'RNGDataFlow', 'ProxyDataFlow', 'DataFlowTerminated',
           'DataFromList', 'DataFromGenerator', 'DataFromIterable', 'DataFromQueue', 'FakeData',
           'BatchData', 'BatchDataByShape', 'MapData', 'MapDataComponent',
           'RepeatedData', 'RepeatedDataPoint', 'FixedSizeData', 'ConcatData', 'JoinData',
           'LocallyShuffleData', 'SelectComponent', 'CacheData', 'PrintData', 'TestDataSpeed',
           'RandomChooseData', 'RandomMixData',
           'MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadRunner', 'DataFlowWorkerError',
           'PrefetchData', 'MultiProcessPrefetchData', 'PrefetchDataZMQ', 'MultiThreadPrefetchData',
           'MultiThreadMapData', 'MultiProcessMapData', 'MultiProcessMapDataZMQ',
           'MultiProcessMapAndBatchData', 'MultiProcessMapAndBatchDataZMQ',
           'send_dataflow_zmq', 'RemoteDataZMQ',
           'MsgpackSerializer', 'NumpySerializer', 'TFRecordSerializer', 'LMDBSerializer', 'HDF5Serializer',
           'LMDBData', 'LMDBDataDecoder', 'CaffeLMDB', 'HDF5Data', 'SVMLightData',
           'ImageFromFile', 'AugmentImageComponent', 'AugmentImageComponents', 'AugmentImageCoordinates',
           'save_shards', 'ShardedData', 'GlobalOrder', 'ShardError']
