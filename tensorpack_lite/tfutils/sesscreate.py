"""Session creators: how a trainer or predictor obtains its ``tf.compat.v1.Session``, and
:func:`create_initialized_session`, a session filled by a :class:`SessionInit`."""

from ..compat import tfv1
from ..utils import logger
from .common import get_default_sess_config

__all__ = ['NewSessionCreator', 'ReuseSessionCreator', 'SessionCreatorAdapter', 'create_initialized_session']


class NewSessionCreator(tfv1.train.SessionCreator):
    """Creates a new session and runs the global, local and table initializers.

    Args:
        target (str): the session target ('' for in-process).
        config (tf.compat.v1.ConfigProto): defaults to :func:`get_default_sess_config`.
    """

    def __init__(self, target='', config=None):
        self.target = target
        self.user_provided_config = config is not None
        self.config = config if config is not None else get_default_sess_config()

    def create_session(self):
        sess = tfv1.Session(target=self.target, config=self.config)
        with sess.graph.as_default():
            init_op = tfv1.group(tfv1.global_variables_initializer(),
                                 tfv1.local_variables_initializer(),
                                 tfv1.tables_initializer(), name='tensorpack_lite_init')
        sess.run(init_op)
        logger.info("Session created and variables initialized.")
        return sess


class ReuseSessionCreator(tfv1.train.SessionCreator):
    """Hands out an existing session untouched (nothing is initialized)."""

    def __init__(self, sess):
        self.sess = sess

    def create_session(self):
        return self.sess


class SessionCreatorAdapter(tfv1.train.SessionCreator):
    """Applies ``func(sess) -> sess`` to what another creator creates (e.g. a debugger wrapper)."""

    def __init__(self, session_creator, func):
        self._creator = session_creator
        self._func = func

    def create_session(self):
        return self._func(self._creator.create_session())


def create_initialized_session(graph, session_creator, session_init, owner, finalize=False):
    """A session on ``graph`` made by ``session_creator``, its variables filled by
    ``session_init`` (whose ops are added to the graph first). The session is closed when
    anything fails.

    Args:
        graph (tf.Graph): the graph the model was built in.
        session_creator (tf.compat.v1.train.SessionCreator): makes the session.
        session_init (SessionInit): fills the variables.
        owner (str): who asks, for errors (e.g. ``'OfflinePredictor'``).
        finalize (bool): finalize the graph before filling the variables.
    """
    with graph.as_default():
        session_init.setup_graph()
        sess = session_creator.create_session()
        try:
            if sess.graph is not graph:
                raise ValueError("{}: the session_creator {!r} made a session on another graph than "
                                 "the model's.".format(owner, session_creator))
            if finalize:
                graph.finalize()
            session_init.run_init(sess)
        except Exception:
            sess.close()
            raise
    return sess
