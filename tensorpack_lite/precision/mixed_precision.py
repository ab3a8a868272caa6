"""Mixed-precision training: the model's graph stays float32 (variables, optimizer slots,
checkpoints) and TensorFlow's grappler rewrite computes its heavy ops in 16 bits.

* ``'bf16'``: ``auto_mixed_precision_onednn_bfloat16``, bfloat16 on CPUs with AVX512-BF16 or
  AMX (emulated by oneDNN on other AVX512 CPUs; without AVX512F TensorFlow leaves the graph
  float32). bfloat16 has float32's range: no loss scaling is needed. :class:`PrecisionReport`
  measures which of these a run took.
* ``'fp16'``: ``auto_mixed_precision`` (float16 on GPUs), ``auto_mixed_precision_cpu`` on a
  machine without a GPU (float16 numbers emulated on the CPU: the same overflows as on a
  GPU, no speed-up), and dynamic loss scaling (:mod:`~tensorpack_lite.precision.loss_scale`).
  The CPU rewrite runs first, before grappler's other passes: see
  :func:`mixed_precision_session_config`.

A trainer takes a mode through ``trainer.mixed_precision = 'bf16'`` (or
``TrainConfig(mixed_precision='bf16')``); any session gets the rewrite from
:func:`mixed_precision_session_config`. See docs/mixed_precision.md.
"""

import weakref

from ..compat import tf, tf_internal, tfv1
from ..utils import logger
from ..utils.cpu import CPUINFO, cpu_flags   # cpu_flags: also one of this module's names
from ..tfutils.common import get_default_sess_config
from ..utils.gpu import get_num_gpu
from .loss_scale import DynamicLossScale

__all__ = ['MODES', 'CPU_FP16_REWRITE', 'MixedPrecisionError', 'check_rewrite', 'MixedPrecision',
           'mixed_precision_session_config', 'cpu_flags', 'cpu_bf16_flags', 'missing_hardware',
           'NATIVE', 'EMULATED', 'FLOAT32', 'ops_in_16_bits', 'measured_path',
           'PrecisionReport', 'expect_float16_rewrite', 'float16_rewrite_expected']

MODES = ('bf16', 'fp16')
"""The mixed-precision modes (None: float32 throughout)."""

_BF16_FLAGS = ('avx512_bf16', 'amx_bf16')
_BF16_REWRITE_FLAGS = ('avx512f', 'avx_ne_convert')
# TensorFlow's oneDNN bfloat16 rewrite acts only on CPUs with one of these (it leaves the graph
# float32 elsewhere); with them but without _BF16_FLAGS, oneDNN emulates bfloat16 arithmetic


def cpu_bf16_flags(cpuinfo=CPUINFO):
    """The CPU flags among ``avx512_bf16`` and ``amx_bf16`` that ``cpuinfo`` lists (a set)."""
    return cpu_flags(cpuinfo).intersection(_BF16_FLAGS)


def missing_hardware(mode, flags=None):
    """What this machine lacks to make ``mode`` fast, and what to expect (a str), or None.
    ``flags``: the CPU's flags (default :func:`cpu_flags`)."""
    flags = cpu_flags() if flags is None else set(flags)
    if mode == 'bf16' and not flags.intersection(_BF16_REWRITE_FLAGS):
        return ("mixed_precision='bf16': this CPU has neither AVX512F nor AVX-NE-CONVERT, which "
                "TensorFlow's oneDNN bfloat16 rewrite needs: it leaves the graph in float32, so this run "
                "trains in float32 (the first step measures it and says so).")
    if mode == 'bf16' and not flags.intersection(_BF16_FLAGS):
        return ("mixed_precision='bf16': this CPU has neither AVX512-BF16 nor AMX (no avx512_bf16/amx_bf16 "
                "in /proc/cpuinfo); training runs correctly but oneDNN emulates bfloat16 on AVX512F: "
                "expect it as slow as or slower than float32.")
    if mode == 'fp16' and get_num_gpu() == 0:
        return ("mixed_precision='fp16': no GPU; float16 is emulated on the CPU (float16 values, float32 "
                "arithmetic), so training runs correctly with loss scaling as on a GPU but expect it "
                "slower than float32. On a CPU, use 'bf16' for speed.")
    return None


NATIVE, EMULATED, FLOAT32 = 'native', 'emulated', 'float32'
"""The paths a mode can take, as :class:`PrecisionReport` measures them: 16-bit arithmetic on
the hardware's own instructions, 16-bit values emulated, or no op rewritten (a float32 run)."""

_TYPE_OF_MODE = {'bf16': tf.bfloat16.as_datatype_enum, 'fp16': tf.float16.as_datatype_enum}
_NOT_COMPUTING = ('Cast', '_Arg', '_Retval', '_Send', '_Recv', '_HostSend', '_HostRecv', 'Const', 'Identity')


def ops_in_16_bits(graph_defs, mode):
    """``(ops computing in the mode's 16-bit type, all ops)`` of ``graph_defs`` (GraphDefs, e.g.
    the partition graphs of a run): an op counts when one of its type attributes is that type;
    casts, constants and transfers do not."""
    wanted = _TYPE_OF_MODE[mode]
    computing = total = 0
    for graph_def in graph_defs:
        for node in graph_def.node:
            total += 1
            if node.op in _NOT_COMPUTING:
                continue
            if any(attr.type == wanted or wanted in attr.list.type for attr in node.attr.values()):
                computing += 1
    return computing, total


def measured_path(mode, computing, flags=None, num_gpu=None):
    """``(path, why)`` of ``mode`` given how many ops compute in 16 bits (``computing``), the
    CPU's flags (default :func:`cpu_flags`) and the GPUs (default :func:`get_num_gpu`)."""
    flags = cpu_flags() if flags is None else set(flags)
    if not computing:
        if mode == 'bf16' and not flags.intersection(_BF16_REWRITE_FLAGS):
            return FLOAT32, ("this CPU has neither AVX512F nor AVX-NE-CONVERT, which TensorFlow's oneDNN "
                             "bfloat16 rewrite needs")
        return FLOAT32, "TensorFlow's rewrite found no op of this model to convert"
    if mode == 'bf16':
        native = sorted(flags.intersection(_BF16_FLAGS))
        if native:
            return NATIVE, "on this CPU's bfloat16 instructions ({})".format(', '.join(native))
        return EMULATED, ("emulated by oneDNN on AVX512F (no avx512_bf16 or amx_bf16): expect float32's "
                          "speed or less")
    if (get_num_gpu() if num_gpu is None else num_gpu) > 0:
        return NATIVE, 'on the GPU'
    return EMULATED, "emulated on the CPU (no GPU): float16's numbers, not its speed"


class PrecisionReport(tfv1.train.SessionRunHook):
    """Measures what a mode's rewrite did: the first run asks TensorFlow for the graph as it ran
    it (its partition graphs, after grappler) and counts the ops computing in 16 bits. Then
    :attr:`path` is :data:`NATIVE`, :data:`EMULATED` or :data:`FLOAT32` and one log line says
    it, e.g. ``mixed_precision='bf16', measured at the first step: 52 of 610 ops compute in
    bfloat16, on this CPU's bfloat16 instructions (avx512_bf16).`` The trainers add one (see
    ``Trainer.precision_report``)."""

    def __init__(self, mode):
        self.mode = mode
        self.path = self.message = None
        self.computing = self.ops = None

    def before_run(self, run_context):
        if self.path is None:
            return tfv1.train.SessionRunArgs(None, options=tfv1.RunOptions(output_partition_graphs=True))
        return None

    def after_run(self, run_context, run_values):
        graphs = run_values.run_metadata.partition_graphs if run_values.run_metadata is not None else ()
        if self.path is None and graphs:
            self.measure(graphs)

    def measure(self, graph_defs):
        """Set :attr:`path` and :attr:`message` from ``graph_defs`` and log the message."""
        self.computing, self.ops = ops_in_16_bits(graph_defs, self.mode)
        self.path, why = measured_path(self.mode, self.computing)
        head = "mixed_precision={!r}, measured at the first step: ".format(self.mode)
        if self.path == FLOAT32:
            self.message = head + ("every one of the {} ops runs in float32 ({}): this run trains in "
                                   "float32, with float32's numbers and speed.".format(self.ops, why))
        else:
            self.message = head + "{} of {} ops compute in {}, {}.".format(
                self.computing, self.ops, 'bfloat16' if self.mode == 'bf16' else 'float16', why)
        (logger.info if self.path == NATIVE else logger.warn)(self.message)


CPU_FP16_REWRITE = 'auto_mixed_precision_cpu'
"""Grappler's float16 rewrite for machines without a GPU (float16 emulated on the CPU)."""

_OFF = 2   # RewriterConfig.OFF

# Grappler's default passes, in the order its meta-optimizer runs them, each with the
# RewriterConfig field that turns it off (TensorFlow 2.18-2.21; names as RewriterConfig.optimizers
# takes them). The passes that are off unless asked for (debug_stripper, pin_to_host,
# scoped_allocator...) and the GPU memory optimizer are not listed: on a CPU they do nothing.
_DEFAULT_PASSES = (('pruning', None), ('function', 'function_optimization'),
                   ('common_subgraph_elimination', 'common_subgraph_elimination'),
                   ('constfold', 'constant_folding'), ('shape', 'shape_optimization'),
                   ('arithmetic', 'arithmetic_optimization'), ('layout', 'layout_optimizer'),
                   ('remap', 'remapping'), ('loop', 'loop_optimization'),
                   ('dependency', 'dependency_optimization'))


def _rewriter_field(mode):
    if mode == 'bf16':
        return 'auto_mixed_precision_onednn_bfloat16'
    if get_num_gpu() > 0:
        return 'auto_mixed_precision'
    fields = tfv1.ConfigProto().graph_options.rewrite_options.DESCRIPTOR.fields_by_name
    return CPU_FP16_REWRITE if CPU_FP16_REWRITE in fields else None


def _passes_after_cpu_fp16_rewrite(rewrite_options):
    """The passes of ``rewrite_options`` (a RewriterConfig) that run after the CPU float16
    rewrite: its own list if it has one, else grappler's default passes it does not turn off."""
    if rewrite_options.optimizers:
        return [name for name in rewrite_options.optimizers if name != CPU_FP16_REWRITE]
    passes = []
    for name, field in _DEFAULT_PASSES:
        if field is None:
            enabled = not rewrite_options.disable_model_pruning
        else:
            enabled = getattr(rewrite_options, field) != _OFF
        if name == 'common_subgraph_elimination':   # grappler runs it only with arithmetic on
            enabled = enabled and rewrite_options.arithmetic_optimization != _OFF
        if enabled:
            passes.append(name)
    return passes


def mixed_precision_session_config(mode, config=None):
    """A copy of ``config`` (default: :func:`get_default_sess_config`) whose grappler rewrite
    computes in ``mode`` ('bf16' or 'fp16'; None: the copy unchanged). For sessions the
    trainers do not make, e.g. ``PredictConfig(session_creator=NewSessionCreator(
    config=mixed_precision_session_config('bf16')))``.

    'fp16' without a GPU runs grappler's passes as an explicit list with the CPU float16
    rewrite first, and the other passes (those ``config`` leaves on) after it in their usual
    order. TensorFlow 2.18-2.21 run that rewrite after pruning and common-subgraph
    elimination, which leave the graph's nodes out of topological order; the rewrite then
    looks up a Cast node it has just inserted and fails (``IndexError:
    absl::container_internal::raw_hash_map<>::at``) on most training graphs, leaving the
    session unusable. Run first, it sees the session's graph in topological order. See
    docs/mixed_precision.md.
    """
    mode = MixedPrecision.of(mode).mode if mode is not None else None
    new = tfv1.ConfigProto()
    new.CopyFrom(config if config is not None else get_default_sess_config())
    field = _rewriter_field(mode) if mode is not None else None
    rewrite = new.graph_options.rewrite_options
    if field == CPU_FP16_REWRITE:
        passes = _passes_after_cpu_fp16_rewrite(rewrite)
        del rewrite.optimizers[:]
        rewrite.optimizers.extend([CPU_FP16_REWRITE] + passes)
    elif field is not None:
        setattr(rewrite, field, 1)   # RewriterConfig.ON
    return new


class MixedPrecisionError(RuntimeError):
    """TensorFlow cannot compute this model's training step in the mode asked for."""


def check_rewrite(sess, op, mode):
    """Build the executors of ``op`` in ``sess`` once (grappler's passes, the mode's rewrite
    included; nothing runs), so that a rewrite TensorFlow cannot apply to this graph stops
    training before it starts instead of at its first step. Raises :class:`MixedPrecisionError`
    naming the cause and what to use instead; ``sess`` is then unusable (close it)."""
    options = tf_internal('core.protobuf.config_pb2').CallableOptions()
    options.target.append(op.name)
    try:
        sess._make_callable_from_options(options)
    except tf.errors.OpError:
        raise   # TensorFlow's report of a bad graph: the step would fail with it too
    except Exception as err:
        instead = ("'bf16' (bfloat16, fast on CPUs with AVX512-BF16 or AMX) or None" if mode == 'fp16'
                   else "None")
        raise MixedPrecisionError(
            "mixed_precision={!r}: TensorFlow {} cannot apply its rewrite to this model's training step: "
            "building the step failed inside TensorFlow with {}: {}. Nothing was trained. Use "
            "mixed_precision={} instead (see docs/mixed_precision.md).".format(
                mode, tf.__version__, type(err).__name__, err, instead)) from err


_FLOAT16_GRAPHS = weakref.WeakSet()


def expect_float16_rewrite(graph):
    """Note that a session will rewrite ``graph``'s float32 ops to float16 (mode 'fp16'), so that
    layers built into it from now on pick kernels that exist in float16 (channels-first pooling
    on a CPU has none: :func:`~tensorpack_lite.models.layout.cpu_runs_nchw`)."""
    _FLOAT16_GRAPHS.add(graph)


def float16_rewrite_expected(graph):
    """Whether :func:`expect_float16_rewrite` was told of ``graph``."""
    return graph in _FLOAT16_GRAPHS


class MixedPrecision:
    """A mixed-precision mode and its loss-scaling settings.

    Args:
        mode (str): 'bf16' or 'fp16'.
        initial_scale (float): the first loss scale ('fp16').
        growth_interval (int): the scale doubles after this many steps in a row whose
            gradients were finite ('fp16').
    """

    def __init__(self, mode, initial_scale=2.0 ** 15, growth_interval=2000):
        if mode not in MODES:
            raise ValueError("mixed_precision must be one of {} or None, got {!r}".format(
                ', '.join(repr(m) for m in MODES), mode))
        if not initial_scale >= 1:
            raise ValueError("MixedPrecision: initial_scale must be >= 1, got {!r}".format(initial_scale))
        if int(growth_interval) != growth_interval or growth_interval < 1:
            raise ValueError("MixedPrecision: growth_interval must be a positive int, got {!r}".format(
                growth_interval))
        self.mode = mode
        self.initial_scale = float(initial_scale)
        self.growth_interval = int(growth_interval)

    @staticmethod
    def of(value):
        """``value`` (a mode string, a MixedPrecision or None) as a MixedPrecision or None."""
        if value is None or isinstance(value, MixedPrecision):
            return value
        return MixedPrecision(value)

    @property
    def loss_scaling(self):
        """Whether the mode scales the loss ('fp16')."""
        return self.mode == 'fp16'

    def new_loss_scale(self, device=None):
        """A :class:`DynamicLossScale` with this mode's settings (its variables on ``device``
        when given) when the mode scales the loss ('fp16'), else None."""
        if not self.loss_scaling:
            return None
        return DynamicLossScale(self.initial_scale, self.growth_interval, device=device)

    def prepare_graph(self, graph):
        """Before the model is built into ``graph``: tell the layers what the rewrite will make of
        it (:func:`expect_float16_rewrite` for 'fp16')."""
        if self.mode == 'fp16':
            expect_float16_rewrite(graph)

    def session_config(self, config):
        """:func:`mixed_precision_session_config` of this mode."""
        return mixed_precision_session_config(self.mode, config)

    def warn_if_unsupported(self):
        """Log the one warning of :func:`missing_hardware`, if any; return it."""
        message = missing_hardware(self.mode)
        if message:
            logger.warn(message)
        return message

    def __repr__(self):
        return "MixedPrecision({!r}, initial_scale={}, growth_interval={})".format(
            self.mode, self.initial_scale, self.growth_interval)
