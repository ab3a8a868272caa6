"""models: the names tensorpack 0.11's models exports, PReLU's default and its variable,
Deconv2D, VariableHolder, and rename_tflayer_get_variable (tf.layers' variable names made
tensorpack's, so a FullyConnected can reuse them)."""

import tensorpack_lite.models as models
from tensorpack_lite.models import common


# tensorpack 0.11's models.__all__
TENSORPACK_MODELS = [
    'AvgPooling', 'BNReLU', 'BatchNorm', 'BatchRenorm', 'ConcatWith', 'Conv2D', 'Conv2DTranspose', 'Deconv2D',
    'Dropout', 'FixedUnPooling', 'FullyConnected', 'GlobalAvgPooling', 'InstanceNorm', 'LayerNorm',
    'LinearWrap', 'MaxPooling', 'Maxout', 'PReLU', 'VariableHolder', 'disable_layer_logging',
    'l1_regularizer', 'l2_regularizer', 'layer_register', 'regularize_cost',
    'regularize_cost_from_collection', 'rename_tflayer_get_variable']


def test_models_exports_tensorpack_names():
    assert [n for n in TENSORPACK_MODELS if n not in models.__all__ or not hasattr(models, n)] == []
    for name in ('layer_register', 'VariableHolder', 'rename_tflayer_get_variable', 'disable_layer_logging'):
        assert name in common.__all__ and getattr(common, name) is getattr(models, name)
