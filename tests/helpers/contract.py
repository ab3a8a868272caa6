"""The public names of the contract (../shared/API.md) the tests check, by module: the first
round's (CONTRACT: exported by their package and by tensorpack_lite), the second round's, those
only importable from their submodule, and the names of ``dataflow.imgaug`` and ``dataflow.dataset``."""

__all__ = ['CONTRACT', 'SECOND_ROUND', 'IMGAUG_NAMES', 'DATASET_NAMES', 'SUBMODULE_ONLY']

CONTRACT = {
    'tensorpack_lite.train': [
        'Trainer', 'StopTraining', 'DEFAULT_CALLBACKS', 'DEFAULT_MONITORS', 'TowerTrainer',
        'SingleCostTrainer', 'SimpleTrainer', 'NoOpTrainer', 'QueueInputTrainer', 'TrainConfig',
        'launch_train_with_config', 'ModelDesc', 'ModelDescBase', 'AutoResumeTrainConfig',
        'SyncMultiGPUTrainerParameterServer', 'SyncMultiGPUTrainer', 'SyncMultiGPUTrainerReplicated',
        'AsyncMultiGPUTrainer', 'HorovodTrainer'],
    'tensorpack_lite.graph_builder': [
        'DataParallelBuilder', 'SyncMultiGPUParameterServerBuilder', 'SyncMultiGPUReplicatedBuilder',
        'AsyncMultiGPUBuilder', 'LeastLoadedDeviceSetter', 'override_to_local_variable', 'allreduce_grads',
        'average_grads', 'aggregate_grads', 'split_grad_list', 'merge_grad_list', 'GradientPacker'],
    'tensorpack_lite.input_source': [
        'InputSource', 'PlaceholderInput', 'FeedInput', 'FeedfreeInput', 'QueueInput',
        'BatchQueueInput', 'TensorInput', 'DummyConstantInput', 'ZMQInput', 'TFDatasetInput',
        'StagingInput'],
    'tensorpack_lite.predict': ['PredictorBase', 'OnlinePredictor', 'OfflinePredictor', 'PredictConfig',
                                'SimpleDatasetPredictor', 'MultiProcessDatasetPredictor',
                                'MultiTowerOfflinePredictor', 'DataParallelOfflinePredictor'],
    'tensorpack_lite.callbacks': [
        'Callback', 'ProxyCallback', 'CallbackFactory', 'Callbacks', 'PeriodicTrigger',
        'PeriodicCallback', 'EnableCallbackIf', 'ProgressBar', 'EstimatedTimeLeft',
        'MovingAverageSummary', 'MergeAllSummaries', 'SimpleMovingAverage', 'RunOp', 'RunUpdateOps',
        'ProcessTensors', 'SessionRunTimeout', 'ThroughputTracker', 'PeakMemoryTracker',
        'GPUUtilizationTracker', 'StartProcOrThread', 'CallbackToHook', 'HookToCallback',
        'MonitorBase', 'Monitors', 'TFEventWriter', 'JSONWriter', 'ScalarPrinter', 'SendMonitorData',
        'ModelSaver', 'MinSaver', 'MaxSaver', 'InferenceRunner', 'Inferencer', 'ScalarStats',
        'ClassificationError', 'HyperParam', 'GraphVarParam', 'ObjAttrParam', 'HyperParamSetter',
        'HumanHyperParamSetter', 'ScheduledHyperParamSetter', 'HyperParamSetterWithFunc',
        'StatMonitorParamSetter', 'DumpTensors', 'DumpTensorAsImage', 'DumpParamAsImage', 'SendStat',
        'InjectShell', 'DataParallelInferenceRunner'],
    'tensorpack_lite.dataflow': [
        'DataFlow', 'RNGDataFlow', 'ProxyDataFlow', 'DataFlowTerminated', 'DataFromList',
        'DataFromGenerator', 'DataFromIterable', 'BatchData', 'BatchDataByShape', 'MapData',
        'MapDataComponent', 'RepeatedData', 'RepeatedDataPoint', 'FixedSizeData', 'ConcatData',
        'JoinData', 'LocallyShuffleData', 'SelectComponent', 'CacheData', 'PrintData', 'TestDataSpeed',
        'MultiProcessRunner', 'MultiProcessRunnerZMQ', 'MultiThreadMapData', 'MultiProcessMapData',
        'MultiProcessMapDataZMQ', 'MultiThreadRunner', 'PrefetchData', 'PrefetchDataZMQ', 'send_dataflow_zmq',
        'RemoteDataZMQ', 'MsgpackSerializer', 'NumpySerializer', 'TFRecordSerializer'],
    'tensorpack_lite.models': [
        'layer_register', 'Conv2D', 'Conv2DTranspose', 'FullyConnected', 'BatchNorm', 'BatchRenorm',
        'LayerNorm', 'InstanceNorm', 'MaxPooling', 'AvgPooling', 'GlobalAvgPooling', 'FixedUnPooling',
        'Dropout', 'LeakyReLU', 'BNReLU', 'Maxout', 'ConcatWith', 'LinearWrap', 'regularize_cost',
        'regularize_cost_from_collection', 'l2_regularizer', 'l1_regularizer'],
    'tensorpack_lite.tfutils.argscope': ['argscope', 'get_arg_scope'],
}

# ../shared/API.md, "Added in the second round" (the multi-worker trainers are checked with them).
SECOND_ROUND = {
    'tensorpack_lite.dataflow': [
        'FakeData', 'RandomMixData', 'RandomChooseData', 'LMDBSerializer', 'HDF5Serializer', 'ImageFromFile',
        'AugmentImageComponent', 'AugmentImageComponents', 'AugmentImageCoordinates'],
    'tensorpack_lite.predict': ['FeedfreePredictor'],
    'tensorpack_lite.callbacks': ['BinaryClassificationStats', 'CheckNumerics'],
    'tensorpack_lite.tfutils': ['get_default_sess_config', 'get_tf_version_tuple', 'SmartInit'],
}
IMGAUG_NAMES = [
    'ImageAugmentor', 'AugmentorList', 'MapImage', 'Flip', 'Resize', 'ResizeShortestEdge', 'RandomResize',
    'RandomCrop', 'CenterCrop', 'CenterPaste', 'RandomPaste', 'GoogleNetRandomCropAndResize',
    'RotationAndCropValid', 'RandomOrderAug', 'Brightness', 'BrightnessScale', 'Contrast', 'Saturation',
    'Lighting', 'Grayscale', 'MeanVarianceNormalize', 'ToFloat32', 'ToUint8', 'SaltPepperNoise',
    'CropTransform']
DATASET_NAMES = ['SVHNDigit', 'BSDS500', 'ILSVRC12', 'ILSVRC12Files', 'ILSVRCMeta']

SUBMODULE_ONLY = {
    'tensorpack_lite.tfutils.sesscreate': ['NewSessionCreator', 'ReuseSessionCreator'],
    'tensorpack_lite.tfutils.sessinit': ['SessionInit', 'JustCurrentSession', 'SaverRestore',
                                         'SaverRestoreRelaxed', 'DictRestore', 'ChainInit', 'SmartInit',
                                         'get_model_loader'],
    'tensorpack_lite.tfutils.varmanip': ['SessionUpdate', 'dump_session_params', 'save_chkpt_vars',
                                         'load_chkpt_vars', 'get_checkpoint_path'],
    'tensorpack_lite.tfutils.export': ['ModelExporter'],
    'tensorpack_lite.tfutils.common': [
        'get_default_sess_config', 'get_global_step_var', 'get_global_step_value',
        'get_op_tensor_name', 'get_tensors_by_names', 'get_op_or_tensor_by_name',
        'get_tf_version_tuple'],
    'tensorpack_lite.tfutils.scope_utils': ['auto_reuse_variable_scope', 'under_name_scope',
                                            'under_variable_scope'],
    'tensorpack_lite.tfutils.collection': ['backup_collection', 'restore_collection', 'freeze_collection'],
    'tensorpack_lite.tfutils.model_utils': ['describe_trainable_vars', 'get_shape_str'],
    'tensorpack_lite.tfutils.summary': ['create_scalar_summary', 'create_image_summary',
                                        'add_moving_summary', 'add_tensor_summary',
                                        'add_param_summary', 'add_activation_summary'],
    'tensorpack_lite.tfutils.tower': ['TowerContext', 'get_current_tower_context', 'TowerFunc',
                                      'TowerFuncWrapper', 'TowerTensorHandle', 'TowerTensorHandles',
                                      'BaseTowerContext', 'TrainTowerContext', 'PredictTowerContext'],
    'tensorpack_lite.tfutils.optimizer': ['apply_grad_processors', 'PostProcessOptimizer',
                                          'ProxyOptimizer', 'AccumGradOptimizer'],
    'tensorpack_lite.tfutils.gradproc': ['GradientProcessor', 'FilterNoneGrad', 'GlobalNormClip',
                                         'MapGradient', 'SummaryGradient', 'PrintGradient',
                                         'CheckGradient', 'ScaleGradient'],
    'tensorpack_lite.tfutils.varreplace': ['custom_getter_scope', 'freeze_variables', 'remap_variables'],
    'tensorpack_lite.utils.serialize': ['dumps', 'loads'],
    'tensorpack_lite.utils.logger': ['info', 'warn', 'error', 'exception', 'set_logger_dir',
                                     'auto_set_dir', 'get_logger_dir'],
    'tensorpack_lite.utils.argtools': ['memoized', 'memoized_method', 'memoized_ignoreargs', 'map_arg',
                                       'graph_memoized', 'shape2d', 'shape4d', 'call_only_once', 'log_once'],
    'tensorpack_lite.utils.stats': ['StatCounter', 'RatioCounter', 'Accuracy', 'BinaryStatistics'],
    'tensorpack_lite.utils.utils': ['get_rng', 'get_tqdm', 'get_tqdm_kwargs', 'humanize_time_delta',
                                    'fix_rng_seed'],
    'tensorpack_lite.utils.concurrency': ['StoppableThread', 'ShareSessionThread',
                                          'ensure_proc_terminate', 'start_proc_mask_signal'],
    'tensorpack_lite.utils.gpu': ['get_num_gpu'],
    'tensorpack_lite.utils.viz': ['stack_patches', 'gen_stack_patches', 'draw_boxes', 'interactive_imshow'],
    'tensorpack_lite.dataflow.dataset': ['Mnist', 'FashionMnist', 'Cifar10', 'Digits'],
}
