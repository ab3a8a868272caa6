"""Describing a model: the table of trainable variables printed when training starts."""

from tabulate import tabulate
from termcolor import colored

from ..compat import tf, tfv1
from ..utils import logger
from .common import get_op_tensor_name

__all__ = ['describe_trainable_vars', 'get_shape_str']


def describe_trainable_vars():
    """Log a table of the trainable variables (name, shape, #elements, plus device and dtype
    when they vary) with the totals, and return the text. Variables of towers other than the
    first (names starting with 'tower') are not repeated."""
    variables = tfv1.get_collection(tfv1.GraphKeys.TRAINABLE_VARIABLES)
    if not variables:
        logger.warn("No trainable variables in the graph!")
        return None
    rows = []
    total_elements = total_bytes = 0
    for var in variables:
        if var.name.startswith('tower'):
            continue
        shape = var.get_shape()
        elements = shape.num_elements()
        if elements is None:
            logger.warn("Shape of variable {} is not fully defined: {}".format(var.name, shape))
            elements = 0
        total_elements += elements
        total_bytes += elements * var.dtype.base_dtype.size
        shape_text = shape.as_list() if shape.rank is not None else '<unknown>'
        rows.append([get_op_tensor_name(var.name)[0], shape_text, elements, var.device,
                     var.dtype.base_dtype.name])
    headers = ['name', 'shape', '#elements', 'device', 'dtype']
    keep = [0, 1, 2]
    if len({row[3] for row in rows}) > 1:
        keep.append(3)
    if {row[4] for row in rows} != {'float32'}:
        keep.append(4)
    table = tabulate([[row[i] for i in keep] for row in rows], headers=[headers[i] for i in keep])
    totals = ("\nNumber of trainable variables: {}\nNumber of parameters (elements): {}\n"
              "Storage space needed for all trainable variables: {:.02f}MB").format(
                  len(rows), total_elements, total_bytes / 1024.0 ** 2)
    text = "List of Trainable Variables:\n" + table + totals
    logger.info(colored("List of Trainable Variables:\n", 'cyan') + table + colored(totals, 'cyan'))
    return text


def get_shape_str(tensors):
    """The static shape(s) of a tensor or list of tensors as text, e.g. ``'[None, 28, 28]'``."""
    items = tensors if isinstance(tensors, (list, tuple)) else [tensors]
    for item in items:
        if not isinstance(item, (tf.Tensor, tf.Variable)):
            raise TypeError("get_shape_str() takes tensors, got {!r}".format(type(item)))
    return ", ".join(str(item.get_shape().as_list()) for item in items)
