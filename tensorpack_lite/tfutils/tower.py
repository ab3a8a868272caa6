"""Towers: building the same model function several times in one graph.

A *tower* is one call of a model-building function ("tower function") under a
:class:`TowerContext`. Data-parallel training builds one training tower per device, and
inference builds further towers on the same graph. The rules every tower function follows:

1. It gets its inputs as arguments and builds the graph from them only.
2. It creates variables with ``tf.compat.v1.get_variable`` (never ``tf.Variable``), so that
   they are created once, by the tower that owns variables (the first training tower, or a
   tower with its own ``vs_name``), and *reused* by every other tower: those towers run
   under a variable scope with ``reuse=True``.
3. It finds out whether it is training from :func:`get_current_tower_context` (e.g. to
   switch batch normalization), not from a Python flag of its own.
4. Names that start with ``tower`` are reserved for towers (``tower0``, ``tower1``...): do not
   give your own variables or scopes such names, or a tower name will collide with them.

Example::

    def tower_fn(image, label):
        W = tf.compat.v1.get_variable('W', [784, 10])
        logits = tf.matmul(image, W)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=label, logits=logits), name='loss')

    func = TowerFunc(tower_fn, [tf.TensorSpec([None, 784], tf.float32, 'image'),
                                tf.TensorSpec([None], tf.int32, 'label')])
    with TrainTowerContext('tower0', index=0, total=2):
        func(image0, label0)          # creates W, and op 'tower0/loss'
    with TrainTowerContext('tower1', index=1, total=2):
        func(image1, label1)          # reuses W, creates op 'tower1/loss'
    func.towers[1]['loss']            # the tensor 'tower1/loss:0'
    func.towers.training()[0]['image']   # image0, the input fed to tower0
"""

from .inference_tower import build_predict_tower
from .tower_context import (BaseTowerContext, PredictTowerContext, TowerContext, TrainTowerContext,
                            get_current_tower_context)
from .tower_func import TowerFunc, TowerFuncWrapper, TowerTensorHandle, TowerTensorHandles

__all__ = ['BaseTowerContext', 'TrainTowerContext', 'PredictTowerContext', 'TowerContext',
           'get_current_tower_context', 'TowerFunc', 'TowerFuncWrapper',
           'TowerTensorHandle', 'TowerTensorHandles', 'build_predict_tower']
