"""Session initializers: what the variables hold when training starts.

A :class:`SessionInit` may add ops to the graph in :meth:`SessionInit._setup_graph` (called
before the graph is finalized) and fills the session in :meth:`SessionInit._run_init`.
"""

__all__ = ['SessionInit', 'JustCurrentSession']


class SessionInit:
    """Base class of session initializers.

    Example, in a custom training script::

        init = SaverRestore('train_log/model-1000')
        init.init(sess)
    """

    def init(self, sess):
        """Set up the graph, then initialize ``sess``."""
        self._setup_graph()
        self._run_init(sess)

    def _setup_graph(self):
        """Add the ops this initializer needs, before the graph is finalized."""

    def _run_init(self, sess):
        """Initialize ``sess``."""


class JustCurrentSession(SessionInit):
    """Leaves the session as its creator made it (the variables keep their initial values)."""
