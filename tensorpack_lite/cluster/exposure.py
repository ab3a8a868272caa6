"""What a process's servers expose: the ports it listens on and the addresses that reach them,
measured on this machine, and the rule for public addresses.

TensorFlow's distributed runtime authenticates nobody: whoever reaches a task's port runs any
graph there, as the training user (docs/security.md). So before a task's server starts,
:func:`check_server_exposure` says where it will be reachable, and refuses when an interface of
this machine has a public address unless the network is declared trusted
(``TENSORPACK_LITE_TRUSTED_NETWORK=1`` or ``create_server(trusted_network=True)``). A public
address on no interface (NAT: an EC2 or GCE instance's public IP, a forwarded port, a load
balancer) is not seen. Inside a launcher job's private network namespace
(:mod:`tensorpack_lite.cluster.private_network`) nothing outside the job reaches it, and it says
so instead. :func:`describe_listening` gives the same accounting for any engine (MPI ranks).

No TensorFlow is imported here.
"""

import ipaddress
import os
import socket

import psutil

from ..utils import logger

__all__ = ['TRUSTED_NETWORK_VARIABLE', 'PRIVATE_NETWORK_VARIABLE', 'PublicAddressError',
           'interface_addresses', 'host_addresses', 'listening_sockets', 'is_public', 'network_namespace',
           'in_private_network', 'network_is_trusted', 'reachable_addresses', 'remote_hosts',
           'describe_addresses', 'describe_listening', 'say_what_listens', 'check_server_exposure']

TRUSTED_NETWORK_VARIABLE = 'TENSORPACK_LITE_TRUSTED_NETWORK'
"""Set to ``1`` to declare that this machine's network admits only the job's own hosts (a
firewall, a VPC, a NetworkPolicy): a task's server then starts on a host with a public
address (see docs/security.md)."""

PRIVATE_NETWORK_VARIABLE = 'TENSORPACK_LITE_PRIVATE_NETWORK'
"""Set by the launcher in its tasks' environment: the identity (``net:[inode]``) of the job's
private network namespace. A process whose own namespace has this identity is in it."""

_TRUE = ('1', 'true', 'yes', 'on')
_WILDCARDS = ('0.0.0.0', '::')
SECURITY_DOC = 'docs/security.md'


_UNSEEN = (" A public address on no interface is not seen here: a cloud instance's public IP (EC2, GCE: "
           "NAT), a forwarded port or a load balancer reach the port all the same, as far as the firewall "
           "lets them.")


class PublicAddressError(RuntimeError):
    """A server would be reachable on a public address of this machine, and the network is not
    declared trusted."""


def interface_addresses():
    """Every IP address of this machine's network interfaces (in this process's network
    namespace, from ``psutil.net_if_addrs()``), loopback included, as strings without a scope;
    IPv4 first."""
    found = {entry.address.split('%')[0] for entries in psutil.net_if_addrs().values() for entry in entries
             if entry.family in (socket.AF_INET, socket.AF_INET6)}
    if not found:
        found = host_addresses(socket.gethostname()) | host_addresses('localhost')
    return sorted(found, key=lambda a: (':' in a, ipaddress.ip_address(a)))


def host_addresses(host):
    """The set of IP addresses that ``host`` (a name or an address) resolves to; empty when it
    does not resolve."""
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except socket.gaierror:
        return set()


def listening_sockets(pid='self'):
    """``[(address, port)]``: the TCP sockets that process ``pid`` (``'self'``: this one) listens
    on, as psutil sees them in this process's network namespace (empty where it cannot). A
    wildcard bind shows as ``'0.0.0.0'`` or ``'::'``."""
    try:
        process = psutil.Process(None if pid == 'self' else int(pid))
        connections = getattr(process, 'net_connections', None) or process.connections   # psutil < 6
        found = {(c.laddr[0], c.laddr[1]) for c in connections(kind='tcp') if c.status == psutil.CONN_LISTEN}
    except (psutil.Error, OSError):
        return []
    return sorted(found, key=lambda e: (e[1], e[0]))


def is_public(address):
    """Whether an IP address is reachable from the internet (a global unicast address: not
    loopback, private, link-local, shared or reserved)."""
    ip = ipaddress.ip_address(address.split('%')[0])
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _is_loopback(address):
    return ipaddress.ip_address(address.split('%')[0]).is_loopback


def _kind(address):
    ip = ipaddress.ip_address(address.split('%')[0])
    if ip.is_loopback:
        return 'loopback'
    if ip.is_link_local:
        return 'link-local'
    return 'PUBLIC' if is_public(address) else 'private'


def network_namespace(pid='self'):
    """The identity of a process's network namespace (``'net:[4026531840]'``), or None where
    there is none to read (not Linux)."""
    try:
        return os.readlink('/proc/{}/ns/net'.format(pid))
    except OSError:
        return None


def in_private_network(environ=None):
    """Whether this process runs in the private network namespace its launcher made for the job
    (and named in ``TENSORPACK_LITE_PRIVATE_NETWORK``)."""
    environ = os.environ if environ is None else environ
    expected = environ.get(PRIVATE_NETWORK_VARIABLE)
    return bool(expected) and network_namespace() == expected


def network_is_trusted(trusted=None, environ=None):
    """``trusted`` when given, else whether ``TENSORPACK_LITE_TRUSTED_NETWORK`` declares the
    network trusted."""
    if trusted is not None:
        return bool(trusted)
    environ = os.environ if environ is None else environ
    return environ.get(TRUSTED_NETWORK_VARIABLE, '').strip().lower() in _TRUE


def reachable_addresses(bound, interfaces=None):
    """The addresses that reach a socket bound to ``bound`` (a wildcard: every interface of its
    family; ``'::'`` takes IPv4 too, as Linux binds it dual-stack by default)."""
    interfaces = interface_addresses() if interfaces is None else interfaces
    if bound == '0.0.0.0':
        return [a for a in interfaces if ':' not in a]
    if bound == '::':
        return list(interfaces)
    return [bound]


def remote_hosts(hosts, interfaces=None):
    """The hosts among ``hosts`` (names or addresses) that are not this machine: none of their
    addresses is one of its interfaces' (a host that does not resolve counts as remote)."""
    local = set(interface_addresses() if interfaces is None else interfaces)
    remote = []
    for host in hosts:
        if not host_addresses(host) & local and host not in remote:
            remote.append(host)
    return remote


def describe_addresses(addresses):
    """``'127.0.0.1 (loopback), 10.0.0.5 (private)'``."""
    return ', '.join('{} ({})'.format(a, _kind(a)) for a in addresses) or 'none'


def describe_listening(who, sockets=None, interfaces=None):
    """One text saying on which ports and addresses ``who`` (e.g. ``'MPI rank 1'``) can be
    reached: the sockets it listens on (default: this process's), each with the addresses that
    reach it and their kind. Inside the job's private network, it says that nothing outside the
    job reaches them."""
    sockets = listening_sockets() if sockets is None else sockets
    if not sockets:
        return "{} listens on no TCP port.".format(who)
    interfaces = interface_addresses() if interfaces is None else interfaces
    parts = []
    for bound, port in sockets:
        where = 'every interface' if bound in _WILDCARDS else bound
        parts.append("port {} ({}: {})".format(port, where, describe_addresses(
            reachable_addresses(bound, interfaces))))
    text = "{} listens on {}".format(who, '; '.join(parts))
    if in_private_network():
        return text + ", inside the job's private network namespace: nothing outside the job reaches them."
    return text + "."


def say_what_listens(who, risk):
    """Log :func:`describe_listening` for this process: a warning followed by ``risk`` (what
    whoever reaches the ports can do) when an address beyond loopback reaches one of them
    outside a private network, else an info line."""
    sockets, interfaces = listening_sockets(), interface_addresses()
    text = describe_listening(who, sockets, interfaces)
    beyond_loopback = [a for bound, _ in sockets for a in reachable_addresses(bound, interfaces)
                       if not _is_loopback(a)]
    if beyond_loopback and not in_private_network():
        logger.warn(text + ' ' + risk)
    else:
        logger.info(text)


def check_server_exposure(who, port, trusted=None, spans_hosts=None, interfaces=None):
    """Before a TensorFlow server starts on ``port`` (it listens on every interface): raise
    :class:`PublicAddressError` when a public address of this machine would reach it and the
    network is not declared trusted; otherwise log where it will be reachable (a warning
    outside a private network, naming its addresses and which are public).

    Args:
        who (str): the task, for messages (``'worker 1 (host:2222)'``).
        spans_hosts (list[str]): the cluster's other hosts, when it spans several machines.
    """
    interfaces = interface_addresses() if interfaces is None else interfaces
    if in_private_network():
        logger.info("The server of {} listens on port {} inside the job's private network namespace: "
                    "nothing outside the job reaches it.".format(who, port))
        return
    public = [a for a in interfaces if is_public(a)]
    if public and not network_is_trusted(trusted):
        raise PublicAddressError(
            "Refusing to start the server of {}: this machine has the public address(es) {}, and "
            "TensorFlow's server, which listens on port {} of every interface, runs any graph for "
            "whoever reaches that port (read and write files, run code as this user); it has no "
            "authentication. If only the job's own hosts can reach this machine (a firewall, a VPC, "
            "a Kubernetes NetworkPolicy, WireGuard), declare the network trusted: set {}=1 or "
            "create_server(trusted_network=True). See {}.".format(
                who, ', '.join(public), port, TRUSTED_NETWORK_VARIABLE, SECURITY_DOC))
    cluster = ("its cluster spans the hosts {}".format(', '.join(spans_hosts)) if spans_hosts
               else "it is not in a launcher's private network")
    logger.warn("The server of {} listens on port {} of every interface ({}): reachable at {}; "
                "public: {}. Whoever reaches that port can run any graph there as this user (TensorFlow "
                "authenticates nobody): keep the network private ({}).{}".format(
                    who, port, cluster, describe_addresses(interfaces),
                    ', '.join(public) + ' (declared trusted)' if public else 'none', SECURITY_DOC,
                    '' if public else _UNSEEN))
