"""The hooked session: how the library runs a ``tf.compat.v1.Session`` step by step.

- :mod:`~tensorpack_lite.session.hooked_session`: :class:`HookedSession`, a session whose
  ``run`` also runs the ``before_run``/``after_run`` of ``SessionRunHook``\\ s, through cached
  compiled runs, and the feeds it checks (:class:`CheckedFeeds`).
- :mod:`~tensorpack_lite.session.caller_thread`: the rule for which of those compiled runs
  execute their ops in the caller's thread (:func:`run_in_caller_thread`).
- :mod:`~tensorpack_lite.session.failure`: whether a session is still usable after a run in
  it raised (:func:`leaves_session_unusable`).

The trainers, predictors and inference runners run their steps through it; it needs nothing
of ``tfutils`` and sits beside it.

Example::

    sess = HookedSession(tfv1.Session(), [hook])
    loss = sess.run(cost)          # hook.before_run / after_run around the run
"""

from . import caller_thread, failure, hooked_session
from .caller_thread import run_in_caller_thread, runs_safely_in_caller_thread
from .failure import leaves_session_unusable, note_session_error
from .hooked_session import CheckedFeeds, HookedSession, RunRequests

__all__ = ['HookedSession', 'RunRequests', 'CheckedFeeds',
           'run_in_caller_thread', 'runs_safely_in_caller_thread', 'note_session_error',
           'leaves_session_unusable',
           'caller_thread', 'failure', 'hooked_session']
