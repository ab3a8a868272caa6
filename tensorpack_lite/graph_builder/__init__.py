"""Graph builders: the model contract (``ModelDesc``, which trainers and predictors both
build), and how data-parallel trainers place towers and variables and combine gradients (the
machinery under ``SyncMultiGPUTrainer*`` and ``AsyncMultiGPUTrainer``)."""

from .devices import (LeastLoadedDeviceSetter, check_session_devices, interpret_towers, is_gpu_tower,
                      override_to_local_variable, tower_device)
from .model_desc import ModelDesc, ModelDescBase
from .training import (AsyncMultiGPUBuilder, DataParallelBuilder, SyncMultiGPUParameterServerBuilder,
                       SyncMultiGPUReplicatedBuilder)
from .utils import (GradientPacker, aggregate_grads, allreduce_grads, allreduce_grads_collective,
                    allreduce_grads_hierarchical, average_grads, dense_gradient, merge_grad_list,
                    split_grad_list)

__all__ = ['ModelDesc', 'ModelDescBase',
           'DataParallelBuilder', 'SyncMultiGPUParameterServerBuilder', 'SyncMultiGPUReplicatedBuilder',
           'AsyncMultiGPUBuilder', 'LeastLoadedDeviceSetter', 'override_to_local_variable',
           'interpret_towers', 'tower_device', 'is_gpu_tower', 'check_session_devices',
           'GradientPacker', 'aggregate_grads', 'average_grads', 'allreduce_grads',
           'allreduce_grads_hierarchical', 'allreduce_grads_collective', 'split_grad_list',
           'merge_grad_list', 'dense_gradient']
