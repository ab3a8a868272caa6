"""Whether a session can still be used after a run in it raised.

TensorFlow reports what goes wrong in a run as a ``tf.errors.OpError``; the session works as
before afterwards. Anything else raised from inside TensorFlow's session code is a C++ exception
that got through (e.g. ``IndexError: absl::container_internal::raw_hash_map<>::at`` from a
grappler pass while the run's executors were built). It can leave the session's internal locks
held: every later run in that session then waits for ever, while closing it still works. Such
a session is in an unknown state, and nothing more may run in it.

Such an error is only a suspicion: the trainer then probes the session with a trivial run,
bounded in time (``Trainer.SESSION_PROBE_TIMEOUT``), and uses it for the end of training when it
answers (e.g. after the ``TypeError`` of ``sess.run(object())``, raised by the session's own
checks).

:class:`~tensorpack_lite.session.hooked_session.HookedSession` marks the errors of the runs it
makes (:func:`note_session_error`); :func:`leaves_session_unusable` also recognizes an error
raised inside TensorFlow's session module by a run made elsewhere (e.g. ``trainer.sess.run``).
"""

import sys

from ..compat import tf, tfv1

__all__ = ['note_session_error', 'leaves_session_unusable']

_MARK = 'leaves_session_unusable'


def note_session_error(err):
    """Mark ``err``, raised by a call into a TensorFlow session, as leaving that session
    unusable unless it is an ``OpError`` (TensorFlow's own report of a failed run)."""
    if not isinstance(err, tf.errors.OpError):
        setattr(err, _MARK, True)


def _session_module_file():
    module = sys.modules.get(tfv1.Session.__module__)
    return getattr(module, '__file__', None)


def _raised_in(err, filename):
    """Whether the innermost Python frame of ``err``'s traceback is in ``filename``."""
    tb = err.__traceback__
    if tb is None or filename is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename == filename


def leaves_session_unusable(err):
    """Whether the session a step ran in is in an unknown state after ``err``: ``err`` was
    marked by :func:`note_session_error`, or it is not an ``OpError`` and was raised inside
    TensorFlow's session module (by the C++ runtime or the session's own checks). Never for
    Ctrl-C (``KeyboardInterrupt``): Python handles it only once the run's call has returned."""
    if not isinstance(err, Exception) or isinstance(err, tf.errors.OpError):
        return False
    return bool(getattr(err, _MARK, False)) or _raised_in(err, _session_module_file())
