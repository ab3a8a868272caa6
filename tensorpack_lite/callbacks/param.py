"""Hyper-parameters and the callbacks that change them while training runs (tensorpack's path
to them: :mod:`.hyperparam`, :mod:`.param_setter` and :mod:`.param_feedback` hold them).

A :class:`HyperParam` is something that can be read and set: a variable of the graph
(:class:`GraphVarParam`, e.g. the learning rate) or an attribute of a Python object
(:class:`ObjAttrParam`). A :class:`HyperParamSetter` decides its value: from a schedule, a
function, a statistic that stopped improving, or a file edited by hand.

Example::

    class Model(ModelDesc):
        def optimizer(self):
            lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
            return tf.train.MomentumOptimizer(lr, 0.9)

    callbacks = [ScheduledHyperParamSetter('learning_rate', [(30, 1e-2), (60, 1e-3)])]

Every setter sets its value before training (so that a resumed run starts with the value of
its starting epoch) and whenever it is triggered (by default after every epoch), and puts the
current value into ``trainer.monitors`` after every epoch's trigger (it shows in
``stats.json``).
"""

from .hyperparam import GraphVarParam, HyperParam, ObjAttrParam
from .param_feedback import HumanHyperParamSetter, StatMonitorParamSetter
from .param_setter import HyperParamSetter, HyperParamSetterWithFunc, ScheduledHyperParamSetter

__all__ = ['HyperParam', 'GraphVarParam', 'ObjAttrParam',
           'HyperParamSetter', 'HumanHyperParamSetter', 'ScheduledHyperParamSetter',
           'StatMonitorParamSetter', 'HyperParamSetterWithFunc']
