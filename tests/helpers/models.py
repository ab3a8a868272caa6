"""The models the tests share, each defined once; parameters give the variants the tests need (the
size of an input, an initial value, the learning rate or optimizer, a name a test reads):

- :class:`LineRegression`: y = x w by least squares, x a number or a vector per datapoint;
- :class:`PointMean`: w moves to the mean of the points it gets, and says which it got ('seen');
- :class:`LinearModel`: a linear classifier, with known weights in :func:`linear_config`;
- :class:`MLP`: fully connected layers from a numpy seed; :class:`DigitsMLPBase` and
  :class:`DigitsMLP` are it on the 8x8 digits;
- :class:`WhileLoopRNN`: a recurrent net whose loop is a ``tf.while_loop``.

The multi-process training scripts choose theirs with :func:`add_model_arguments`.

Example::

    from helpers.models import LineRegression
    model = LineRegression(dim=4, init=0.5, lr=0.1, lr_variable=False)
"""

import numpy as np

from tensorpack_lite.compat import tf, tfv1
from tensorpack_lite.dataflow import DataFromList
from tensorpack_lite.predict.config import PredictConfig
from tensorpack_lite.tfutils.summary import add_moving_summary
from tensorpack_lite.tfutils.tower import get_current_tower_context
from tensorpack_lite.train import ModelDesc

from helpers.callbacks import AssignValues

__all__ = ['cross_entropy_cost', 'LINE_INITIAL_LR', 'LineRegression', 'PointMean',
           'W_VALUE', 'B_VALUE', 'X_BATCHES', 'LABEL_BATCHES', 'LinearModel', 'linear_config',
           'batches_dataflow', 'MLP', 'DigitsMLPBase', 'DigitsMLP', 'WhileLoopRNN', 'sequence_samples',
           'add_model_arguments']


def cross_entropy_cost(logits, label):
    """The mean softmax cross-entropy, named 'cost'."""
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                          name='cost')


def _rate(lr, in_variable):
    """``lr``, or with ``in_variable`` a non-trainable variable 'learning_rate' holding it (where
    tensorpack models keep it, for the hyper-parameter callbacks)."""
    if in_variable:
        return tfv1.get_variable('learning_rate', initializer=lr, trainable=False)
    return lr


# ----- least squares ---------------------------------------------------------------------------

LINE_INITIAL_LR = 0.3
"""The learning rate of :class:`LineRegression` by default."""


class LineRegression(ModelDesc):
    """y = x w fitted by least squares: the cost is mean((x w - y)^2), 'cost'; x w is 'pred'.

    x is the input 'x': a number per datapoint ([None], w a number), or with ``dim`` a vector
    ([None, dim], w [dim, 1], pred [None, 1]). y is the input 'y' [None], or the number
    ``target`` (then 'x' is the only input). w is the variable ``weight``, starting at ``init``
    (a number, or an array of w's shape). The optimizer is ``optimizer(rate)``, plain gradient
    descent by default, at the rate ``lr``, kept with ``lr_variable`` in a non-trainable variable
    'learning_rate' (as tensorpack models have it; hyper-parameter tests compute the expected w by
    hand from :data:`LINE_INITIAL_LR`). ``summary`` adds the moving average of the cost.
    'incorrect_vector' is 1 where x w misses y by more than 1 (for ClassificationError).

    Example::

        LineRegression()                                            # y = w x, w from 0
        LineRegression(dim=4, init=1.0, target=0.0, lr=0.01, lr_variable=False)
    """

    def __init__(self, dim=None, init=0.0, target=None, lr=LINE_INITIAL_LR, lr_variable=True,
                 optimizer=tfv1.train.GradientDescentOptimizer, summary=False, weight='w'):
        self.dim, self.init, self.target, self.weight = dim, init, target, weight
        self.lr, self.lr_variable, self.make_optimizer, self.summary = lr, lr_variable, optimizer, summary

    def inputs(self):
        x = tf.TensorSpec([None] if self.dim is None else [None, self.dim], tf.float32, 'x')
        return [x] if self.target is not None else [x, tf.TensorSpec([None], tf.float32, 'y')]

    def build_graph(self, x, y=None):
        shape = () if self.dim is None else (self.dim, 1)
        w = tfv1.get_variable(self.weight, initializer=np.array(np.broadcast_to(
            np.asarray(self.init, np.float32), shape)))
        pred = tf.identity(w * x if self.dim is None else tf.matmul(x, w), name='pred')
        if y is None:
            residual = pred - self.target
        else:
            residual = (pred if self.dim is None else tf.squeeze(pred, 1)) - y
        tf.cast(tf.abs(residual) > 1.0, tf.float32, name='incorrect_vector')
        cost = tf.reduce_mean(tf.square(residual), name='cost')
        if self.summary:
            add_moving_summary(cost)
        return cost

    def optimizer(self):
        return self.make_optimizer(_rate(self.lr, self.lr_variable))


class PointMean(ModelDesc):
    """The points of a batch x ([None, dim]) pull w (from 0) to their mean: the cost is the sum of
    |x - w|^2, 'cost'; 'seen' is the mean of the batch's values, for tests that check which
    datapoints a step got. Gradient descent at ``lr``."""

    def __init__(self, dim=2, lr=0.01):
        self.dim, self.lr = dim, lr

    def inputs(self):
        return [tf.TensorSpec([None, self.dim], tf.float32, 'x')]

    def build_graph(self, x):
        tf.reduce_mean(x, name='seen')
        w = tfv1.get_variable('w', [self.dim], initializer=tfv1.zeros_initializer())
        return tf.reduce_sum(tf.square(x - w), name='cost')

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(self.lr)


# ----- a linear classifier, by default of 3 features into 2 classes with known weights ----------------

W_VALUE = np.array([[1., 2.], [3., 4.], [5., 6.]], np.float32)
B_VALUE = np.array([10., 20.], np.float32)
_RNG = np.random.RandomState(7)
X_BATCHES = [_RNG.randn(n, 3).astype('float32') for n in (4, 2, 3)]
LABEL_BATCHES = [_RNG.randint(0, 2, size=len(x)).astype('int32') for x in X_BATCHES]


class LinearModel(ModelDesc):
    """logits = x W + b ('logits', their softmax 'prob') of ``features`` features into ``classes``
    classes, on the inputs 'x' [None, features] and 'label' [None]; the cost is the mean
    cross-entropy, 'cost'. W ('fc/W') starts at ``init``, b ('fc/b') at 0; :func:`linear_config`
    sets them to :data:`W_VALUE` and :data:`B_VALUE`. Gradient descent at ``lr`` (in a variable
    'learning_rate' with ``lr_variable``); ``summary`` adds the moving average of the cost.
    ``training_flags`` records whether each tower it is built in trains."""

    def __init__(self, features=3, classes=2, init=0.0, lr=0.1, lr_variable=False, summary=False):
        self.features, self.classes, self.init = features, classes, init
        self.lr, self.lr_variable, self.summary = lr, lr_variable, summary
        self.training_flags = []

    def inputs(self):
        return [tf.TensorSpec([None, self.features], tf.float32, 'x'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        ctx = get_current_tower_context()
        self.training_flags.append(None if ctx is None else ctx.is_training)
        W = tfv1.get_variable('fc/W', initializer=np.full((self.features, self.classes), self.init,
                                                          np.float32))
        b = tfv1.get_variable('fc/b', initializer=np.zeros(self.classes, np.float32))
        logits = tf.identity(tf.matmul(x, W) + b, name='logits')
        tf.nn.softmax(logits, name='prob')
        cost = cross_entropy_cost(logits, label)
        if self.summary:
            add_moving_summary(cost)
        return cost

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(_rate(self.lr, self.lr_variable))


def linear_config(output_names):
    """A PredictConfig of :class:`LinearModel` with :data:`W_VALUE` and :data:`B_VALUE`."""
    return PredictConfig(model=LinearModel(), output_names=output_names,
                         session_init=AssignValues({'fc/W': W_VALUE, 'fc/b': B_VALUE}))


def batches_dataflow(*components):
    """A DataFlow whose datapoints are the given batches, in order."""
    return DataFromList([list(c) for c in zip(*components)], shuffle=False)


# ----- fully connected classifiers ----------------------------------------------------------------

class MLP(ModelDesc):
    """A classifier of fully connected layers of ``sizes`` with relu between them, on the inputs
    ``input_name`` [None, sizes[0]] and 'label' [None]. Layer i has the weights 'fc{i}/W', drawn
    from the numpy seed ``seed`` times ``scale`` (so that every run starts equal), and the biases
    'fc{i}/b', from 0. :meth:`outputs` names what tests read -- 'logits', 'prob' (softmax),
    'incorrect_vector' (1 where the arg-max is not the label), 'train_error' and 'accuracy' (its
    mean, and one minus it) -- and returns the mean cross-entropy 'cost'. ``summary`` adds moving
    averages: True for the cost's, or the names of the tensors to average (e.g. ``('cost',
    'accuracy')``). The optimizer is ``optimizer(lr)``, gradient descent by default.
    ``contexts`` records (is_training, ns_name) of each tower it is built in (None outside
    towers).

    Example::

        MLP((16, 8, 2), lr=0.01)
        DigitsMLPBase(hidden=16, summary=('cost', 'accuracy'), optimizer=tfv1.train.AdamOptimizer)
    """

    def __init__(self, sizes=(16, 8, 2), lr=0.1, seed=3, scale=0.2, input_name='x', summary=False,
                 optimizer=tfv1.train.GradientDescentOptimizer):
        self.sizes, self.lr, self.seed, self.scale = tuple(sizes), lr, seed, scale
        self.input_name, self.make_optimizer = input_name, optimizer
        self.summary = ('cost',) if summary is True else tuple(summary or ())
        self.contexts = []

    def inputs(self):
        return [tf.TensorSpec([None, self.sizes[0]], tf.float32, self.input_name),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, x, label):
        ctx = get_current_tower_context()
        self.contexts.append(None if ctx is None else (ctx.is_training, ctx.ns_name))
        rng = np.random.RandomState(self.seed)
        out = x
        for index, (fan_in, fan_out) in enumerate(zip(self.sizes, self.sizes[1:])):
            if index:
                out = tf.nn.relu(out)
            w = tfv1.get_variable('fc{}/W'.format(index),
                                  initializer=(rng.randn(fan_in, fan_out) * self.scale).astype('float32'))
            b = tfv1.get_variable('fc{}/b'.format(index), initializer=np.zeros(fan_out, 'float32'))
            out = tf.matmul(out, w) + b
        return self.outputs(out, label)

    def outputs(self, logits, label):
        """The named tensors of ``logits``, their moving averages; the cost."""
        logits = tf.identity(logits, name='logits')
        tf.nn.softmax(logits, name='prob')
        wrong = tf.cast(tf.not_equal(tf.argmax(logits, 1, output_type=tf.int32), label), tf.float32,
                        name='incorrect_vector')
        named = {'cost': cross_entropy_cost(logits, label),
                 'train_error': tf.reduce_mean(wrong, name='train_error'),
                 'accuracy': tf.subtract(1.0, tf.reduce_mean(wrong), name='accuracy')}
        if self.summary:
            add_moving_summary(*[named[name] for name in self.summary])
        return named['cost']

    def optimizer(self):
        return self.make_optimizer(self.lr)


class DigitsMLPBase(MLP):
    """The :class:`MLP` 64 -> hidden -> 10 on the 8x8 digits (sklearn.datasets.load_digits):
    inputs 'image' [None, 64] and 'label' [None]."""

    def __init__(self, hidden=32, lr=0.1, seed=3, summary=False,
                 optimizer=tfv1.train.GradientDescentOptimizer):
        super().__init__((64, hidden, 10), lr, seed, input_name='image', summary=summary, optimizer=optimizer)
        self.hidden = hidden


class DigitsMLP(DigitsMLPBase):
    """The digits MLP with the moving average of its cost."""

    def __init__(self, hidden=32, lr=0.1, seed=3, optimizer=tfv1.train.GradientDescentOptimizer):
        super().__init__(hidden, lr, seed, summary=True, optimizer=optimizer)


# ----- a tf.while_loop ----------------------------------------------------------------------------

class WhileLoopRNN(ModelDesc):
    """A recurrent net whose loop is a ``tf.while_loop`` over the :attr:`STEPS` steps of its
    input, as TF1-era RNN code writes it: TF1 control flow (``Merge``/``NextIteration`` cycles)
    in a process with ``tf.compat.v1.disable_v2_behavior()`` or ``disable_control_flow_v2()``,
    a functional ``While`` op otherwise. Inputs 'seq' [None, STEPS, FEATURES] and 'label' [None]
    (:func:`sequence_samples`); x_t = seq_t in/W, h_t = tanh(x_t + h_{t-1} rnn/W_h + rnn/b),
    logits = h_STEPS out/W + out/b; the cost is the mean cross-entropy, 'cost'. The weights
    come from a numpy seed (every run starts equal), in the order of :attr:`VARIABLES`.
    Needs no tower context."""

    STEPS, FEATURES, HIDDEN, CLASSES = 5, 4, 6, 3
    VARIABLES = ['in/W', 'rnn/W_h', 'rnn/b', 'out/W', 'out/b']

    def __init__(self, seed=3, lr=0.1):
        self.seed, self.lr = seed, lr

    def inputs(self):
        return [tf.TensorSpec([None, self.STEPS, self.FEATURES], tf.float32, 'seq'),
                tf.TensorSpec([None], tf.int32, 'label')]

    def build_graph(self, seq, label):
        rng = np.random.RandomState(self.seed)
        shapes = [(self.FEATURES, self.HIDDEN), (self.HIDDEN, self.HIDDEN), (self.HIDDEN,),
                  (self.HIDDEN, self.CLASSES), (self.CLASSES,)]
        w_in, w_h, b, w_out, b_out = [
            tfv1.get_variable(name, initializer=(rng.randn(*shape) * 0.3).astype('float32'))
            for name, shape in zip(self.VARIABLES, shapes)]
        inputs = tf.transpose(tf.tensordot(seq, w_in, 1), [1, 0, 2])     # time-major [STEPS, batch, HIDDEN]

        def step(t, h):
            return t + 1, tf.tanh(tf.gather(inputs, t) + tf.matmul(h, w_h) + b)

        _, last = tf.while_loop(lambda t, h: t < self.STEPS, step,
                                [tf.constant(0), tf.zeros_like(inputs[0])], name='rnn_loop')
        return cross_entropy_cost(tf.matmul(last, w_out) + b_out, label)

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(self.lr)


def sequence_samples(num, seed=0):
    """``num`` deterministic [seq, label] datapoints of :class:`WhileLoopRNN`: the label is the
    number of the first and last steps whose first feature is positive (0, 1 or 2)."""
    rng = np.random.RandomState(seed)
    seq = rng.randn(num, WhileLoopRNN.STEPS, WhileLoopRNN.FEATURES).astype('float32')
    label = ((seq[:, 0, 0] > 0).astype('int32') + (seq[:, -1, 0] > 0)).astype('int32')
    return [[x, y] for x, y in zip(seq, label)]


def add_model_arguments(parser, process='process'):
    """The options of the multi-process training scripts that choose their model: ``--model
    tiny|rnn`` (:class:`WhileLoopRNN` on :func:`sequence_samples`) and ``--tf1``."""
    parser.add_argument('--model', choices=['tiny', 'rnn'], default='tiny',
                        help="'rnn': helpers.models.WhileLoopRNN on helpers.models.sequence_samples (a "
                             "tf.while_loop); every {} writes the costs of its steps too".format(process))
    parser.add_argument('--tf1', action='store_true',
                        help='tf.compat.v1.disable_v2_behavior() first, as TF1-era scripts start (v1 control '
                             'flow: a tf.while_loop builds Merge/NextIteration cycles)')
