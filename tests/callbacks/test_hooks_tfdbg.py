"""BinaryClassificationStats, CheckNumerics, GraphProfiler, HostMemoryTracker, GPUMemoryTracker,
TFLocalCLIDebugHook, CometMLMonitor, the DumpTensor name and ScheduledHyperParamSetter's
set_at_beginning, each in a real training of a tiny model."""

from tensorpack_lite.callbacks.hooks import HookToCallback, TFLocalCLIDebugHook


def test_tf_local_cli_debug_hook_wraps_tfdbg(monkeypatch):
    from tensorflow.python import debug as tfdbg
    cb = TFLocalCLIDebugHook(ui_type='readline')
    assert isinstance(cb, HookToCallback) and cb.chief_only
    assert isinstance(cb._hook, tfdbg.LocalCLIDebugHook)

    class StandIn:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs, self.filters = args, kwargs, []

        def add_tensor_filter(self, name, fn):
            self.filters.append((name, fn))

    monkeypatch.setattr(tfdbg, 'LocalCLIDebugHook', StandIn)
    cb = TFLocalCLIDebugHook('readline', dump_root='/tmp/dbg')
    cb.add_tensor_filter('has_inf_or_nan', tfdbg.has_inf_or_nan)
    assert cb._hook.args == ('readline',) and cb._hook.kwargs == {'dump_root': '/tmp/dbg'}
    assert cb._hook.filters == [('has_inf_or_nan', tfdbg.has_inf_or_nan)]
