"""Where the weight averages of a model live: their names beside the model's variables.

:class:`~tensorpack_lite.callbacks.WeightAverage` keeps the average of each trainable variable
``fc0/W`` in a graph variable ``WeightAverage/fc0/W`` (so that it is in every checkpoint), and
counts its updates in ``WeightAverage/num_updates``. What reads the averages back (``SmartInit(...,
averaged=True)``, ``InferenceRunner(..., averaged=True)``) finds them by these names.

Example::

    average_name('fc0/W')                      # 'WeightAverage/fc0/W'
    averaged_values({'fc0/W': w, 'WeightAverage/fc0/W': a, 'WeightAverage/num_updates': 20})
    # ({'fc0/W': a}, 1): the average in place of each weight that has one
"""

from ..compat import tfv1
from .common import get_op_tensor_name

__all__ = ['AVERAGE_SCOPE', 'COUNTER_NAME', 'average_name', 'is_average_name', 'model_weights',
           'average_pairs', 'averaged_values']

AVERAGE_SCOPE = 'WeightAverage'
"""The scope of the averages' variables."""

COUNTER_NAME = AVERAGE_SCOPE + '/num_updates'
"""The variable counting the updates of the averages (int64)."""


def average_name(name):
    """The name of the average of the variable ``name`` (``:0`` optional)."""
    return '{}/{}'.format(AVERAGE_SCOPE, get_op_tensor_name(name)[0])


def is_average_name(name):
    """Whether ``name`` is an average's variable, or their counter."""
    return get_op_tensor_name(name)[0].startswith(AVERAGE_SCOPE + '/')


def model_weights():
    """The variables of the default graph that are averaged: the trainable global variables
    (those checkpoints hold; a replicated trainer's other towers keep local replicas)."""
    global_names = {v.op.name for v in tfv1.global_variables()}
    return [v for v in tfv1.trainable_variables()
            if v.op.name in global_names and not is_average_name(v.op.name)]


def average_pairs(graph=None):
    """``([model variable], [its average], counter)`` for the averages ``graph`` (the default
    graph) holds; empty lists and None when it holds none."""
    graph = graph or tfv1.get_default_graph()
    variables = {v.op.name: v for v in graph.get_collection(tfv1.GraphKeys.GLOBAL_VARIABLES)}
    models, averages = [], []
    for name, var in sorted(variables.items()):
        average = variables.get(average_name(name))
        if average is not None and not is_average_name(name):
            models.append(var)
            averages.append(average)
    return models, averages, variables.get(COUNTER_NAME)


def averaged_values(values):
    """``values`` (``{variable name: value}``, e.g. a checkpoint's) with each weight's average
    in place of the weight, and without the averages' own names; returns it and how many weights
    got their average."""
    names = {get_op_tensor_name(name)[0]: name for name in values}
    result, replaced = {}, 0
    for name, key in names.items():
        if is_average_name(name):
            continue
        average = names.get(average_name(name))
        if average is None:
            result[key] = values[key]
        else:
            result[key] = values[average]
            replaced += 1
    return result, replaced
