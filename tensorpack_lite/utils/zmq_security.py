"""Defences of the ZeroMQ data channels (:func:`~tensorpack_lite.dataflow.send_dataflow_zmq`
to :class:`~tensorpack_lite.input_source.ZMQInput` or
:class:`~tensorpack_lite.dataflow.RemoteDataZMQ`): who may send, and what becomes of a
message that is not a valid datapoint.

By default a channel is unauthenticated and unencrypted: any peer that reaches a TCP endpoint
can send into it. CURVE (ZeroMQ's public-key security) is opt-in: the receiver holds a
keypair and the public keys of the senders it accepts; a sender holds its own keypair and the
receiver's public key. A ZAP authenticator on the receiver refuses every other peer during
the handshake, and the traffic is encrypted.

Example::

    create_curve_keypair('keys', 'trainer')   # keys/trainer.key, keys/trainer.key_secret
    create_curve_keypair('keys', 'loader')
    # on the trainer
    ZMQInput('tcp://0.0.0.0:8877', 50, curve_keys='keys/trainer.key_secret',
             curve_clients=['keys/loader.key'])
    # on the data machine
    send_dataflow_zmq(df, 'tcp://trainer:8877', curve_keys='keys/loader.key_secret',
                      curve_server_key='keys/trainer.key')

Keys are given as z85 ``bytes`` (what ``zmq.curve_keypair()`` returns) or as paths of
certificate files (``str`` or path-like) made by :func:`create_curve_keypair` or
``zmq.auth.create_certificates``.

Nothing here imports TensorFlow; pyzmq is imported on use.
"""

import collections
import os
import time

from . import logger

__all__ = ['CurveKeypair', 'create_curve_keypair', 'load_curve_keypair',
           'CurveReceiver', 'CurveSender', 'DroppedMessages']

_Z85_KEY_LENGTH = 40


class CurveKeypair(collections.namedtuple('CurveKeypair', ['public', 'secret'])):
    """A CURVE keypair: ``public`` and ``secret`` as z85 ``bytes``."""


def _zmq_with_curve(owner):
    import zmq
    if not zmq.has('curve'):
        raise RuntimeError("{}: CURVE keys were given, but this libzmq ({}) was built without "
                           "CURVE support".format(owner, zmq.zmq_version()))
    return zmq


def create_curve_keypair(directory, name):
    """Write a new keypair as ``<directory>/<name>.key`` (the public certificate, to give to
    the other side) and ``<directory>/<name>.key_secret`` (readable by its owner only).

    Returns:
        tuple: the paths of the public and the secret certificate files.
    """
    import zmq.auth
    os.makedirs(directory, mode=0o700, exist_ok=True)
    public_file, secret_file = zmq.auth.create_certificates(directory, name)
    os.chmod(secret_file, 0o600)
    return public_file, secret_file


def load_curve_keypair(path):
    """The :class:`CurveKeypair` in the secret certificate file ``path``.

    Raises:
        ValueError: the file holds no secret key (e.g. it is the public ``.key`` file).
    """
    import zmq.auth
    public, secret = zmq.auth.load_certificate(path)
    if secret is None:
        raise ValueError("The certificate {} holds no secret key: give the '.key_secret' file of "
                         "the keypair".format(path))
    return CurveKeypair(public, secret)


def _keypair(value, argument):
    """A :class:`CurveKeypair` from a keypair or the path of a secret certificate."""
    if isinstance(value, CurveKeypair):
        return value
    if isinstance(value, (str, os.PathLike)):
        return load_curve_keypair(value)
    raise TypeError("{} must be a CurveKeypair or the path of a secret certificate file, got "
                    "{!r}".format(argument, value))


def _public_key(value, argument):
    """A z85 public key from z85 bytes or the path of a certificate file."""
    if isinstance(value, (str, os.PathLike)):
        import zmq.auth
        return zmq.auth.load_certificate(value)[0]
    if isinstance(value, bytes) and len(value) == _Z85_KEY_LENGTH:
        return value
    raise TypeError("{} must be a z85 public key ({} bytes) or the path of a certificate file, "
                    "got {!r}".format(argument, _Z85_KEY_LENGTH, value))


def _curve_requested(owner, keys, other):
    """Whether CURVE is asked for: ``keys`` and ``other`` are (argument name, value, what it
    is) of the two arguments turning it on; both given is True, neither False, one an error."""
    given = [value is not None for _, value, _ in (keys, other)]
    if all(given) or not any(given):
        return all(given)
    (missing, _, what), = [arg for arg, present in zip((keys, other), given) if not present]
    raise ValueError("{}: CURVE needs both {} ({}) and {} ({}); {} is missing".format(
        owner, keys[0], keys[2], other[0], other[2], missing))


class _AllowedKeys(object):
    """The ZAP authenticator's credentials provider: accepts the listed public keys only."""

    def __init__(self, keys):
        self.keys = frozenset(keys)

    def callback(self, domain, key):
        return key in self.keys


class CurveReceiver(object):
    """The receiving side of a CURVE channel: its keypair and the senders it accepts.

    Args:
        owner (str): who receives, for error messages (e.g. ``'ZMQInput'``).
        keys: the receiver's keypair (:class:`CurveKeypair` or a secret certificate path).
        clients: the public keys of the senders allowed in (z85 bytes or certificate paths).

    Use :meth:`start_authenticator` once per ``zmq.Context`` (stop what it returns before the
    context is terminated), then :meth:`configure` on every receiving socket before it binds
    or connects.
    """

    def __init__(self, owner, keys, clients):
        if isinstance(clients, (str, bytes, os.PathLike)) or clients is None:
            raise TypeError("{}: curve_clients must be a list of the senders' public keys "
                            "or certificate files, got {!r}".format(owner, clients))
        self.owner = owner
        self.keys = _keypair(keys, '{}: curve_keys'.format(owner))
        self.clients = [_public_key(c, '{}: curve_clients[{}]'.format(owner, i))
                        for i, c in enumerate(clients)]
        if not self.clients:
            raise ValueError("{}: curve_clients is empty: no sender could connect".format(owner))

    @classmethod
    def from_arguments(cls, owner, curve_keys, curve_clients):
        """A receiver set-up, or None when neither argument is given (no CURVE)."""
        if not _curve_requested(owner, ('curve_keys', curve_keys, "the receiver's keypair"),
                                ('curve_clients', curve_clients, "the senders' public keys")):
            return None
        return cls(owner, curve_keys, curve_clients)

    def start_authenticator(self, context):
        """Start a ZAP authenticator in ``context`` that accepts :attr:`clients` only."""
        _zmq_with_curve(self.owner)
        from zmq.auth.thread import ThreadAuthenticator
        auth = ThreadAuthenticator(context)
        auth.start()
        auth.configure_curve_callback(domain='*', credentials_provider=_AllowedKeys(self.clients))
        return auth

    def configure(self, socket):
        """Make ``socket`` a CURVE server with the receiver's keys."""
        socket.curve_secretkey = self.keys.secret
        socket.curve_publickey = self.keys.public
        socket.curve_server = True


class CurveSender(object):
    """The sending side of a CURVE channel: its keypair and the receiver's public key.

    Args:
        owner (str): who sends, for error messages.
        keys: the sender's keypair (:class:`CurveKeypair` or a secret certificate path).
        server_key: the receiver's public key (z85 bytes or a certificate path).
    """

    def __init__(self, owner, keys, server_key):
        self.owner = owner
        self.keys = _keypair(keys, '{}: curve_keys'.format(owner))
        self.server_key = _public_key(server_key, '{}: curve_server_key'.format(owner))

    @classmethod
    def from_arguments(cls, owner, curve_keys, curve_server_key):
        """A sender set-up, or None when neither argument is given (no CURVE)."""
        if not _curve_requested(owner, ('curve_keys', curve_keys, "the sender's keypair"),
                                ('curve_server_key', curve_server_key, "the receiver's public key")):
            return None
        return cls(owner, curve_keys, curve_server_key)

    def configure(self, socket):
        """Make ``socket`` a CURVE client of the receiver, before it binds or connects."""
        _zmq_with_curve(self.owner)
        socket.curve_secretkey = self.keys.secret
        socket.curve_publickey = self.keys.public
        socket.curve_serverkey = self.server_key


class DroppedMessages(object):
    """Counts the messages a receiver drops (not decodable, or not fitting its inputs) and
    logs them: each of the first :attr:`full_logs` as a warning with its error, then at most
    one warning every :attr:`log_interval` seconds, with the running count.

    Args:
        owner (str): who drops them (e.g. ``'ZMQInput'``), for the log.
        clock: a function giving the time in seconds (``time.monotonic``).
    """

    full_logs = 5
    log_interval = 60.0

    def __init__(self, owner, clock=time.monotonic):
        self.owner = owner
        self.count = 0
        self._clock = clock
        self._last_log = None

    def drop(self, error):
        """Count one dropped message; ``error`` (an exception) says what was wrong with it."""
        self.count += 1
        now = self._clock()
        if self.count > self.full_logs and now - self._last_log < self.log_interval:
            return
        self._last_log = now
        more = ("; further ones are logged at most every {:g} s".format(self.log_interval)
                if self.count == self.full_logs else "")
        logger.warning("{}: dropped a message that is not a valid datapoint ({} dropped so far{}): "
                       "{}: {}".format(self.owner, self.count, more, type(error).__name__, error))
