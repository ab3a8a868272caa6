"""ModelDesc and ModelDescBase (tensorpack's path to them): defined in
:mod:`tensorpack_lite.graph_builder.model_desc`, below both training and prediction."""

from ..graph_builder.model_desc import ModelDesc, ModelDescBase

__all__ = ['ModelDescBase', 'ModelDesc']
