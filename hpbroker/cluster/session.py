"""A ZooKeeper session for one broker: connect, or fail with one clear line.

``zookeeper.connect`` is Kafka's ``host:port[,host:port...][/chroot]``.  The
chroot is created when missing (as Kafka does), through a short session
without it, since a chrooted client cannot create its own root.
"""

from __future__ import annotations

import logging

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

log = logging.getLogger(__name__)


class ZooKeeperUnavailable(Exception):
    """No ZooKeeper server of the ensemble answered in time."""


def split_connect(connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/kafka"`` -> ``("h1:2181,h2:2181", "/kafka")``; chroot "" when none."""
    hosts, slash, chroot = connect.strip().partition("/")
    if not hosts:
        raise ValueError(f"zookeeper.connect {connect!r} names no server")
    return hosts, (slash + chroot).rstrip("/") if slash else ""


def _started(hosts: str, session_timeout_ms: int, connection_timeout_ms: int) -> KazooClient:
    # The connection retries forever once up: a broker rides out a ZooKeeper
    # restart, and its session survives while it is shorter than the timeout.
    client = KazooClient(hosts=hosts, timeout=session_timeout_ms / 1000,
                         connection_retry=KazooRetry(max_tries=-1, max_delay=1.0))
    try:
        client.start(timeout=connection_timeout_ms / 1000)
    except KazooTimeoutError:
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(
            f"could not connect to ZooKeeper at {hosts} within {connection_timeout_ms} ms "
            f"(zookeeper.connection.timeout.ms)") from None
    return client


def connect(connect_string: str, session_timeout_ms: int, connection_timeout_ms: int) -> KazooClient:
    """A started client, rooted at the chroot."""
    hosts, chroot = split_connect(connect_string)
    if chroot:
        bootstrap = _started(hosts, session_timeout_ms, connection_timeout_ms)
        try:
            bootstrap.ensure_path(chroot)
        except KazooException as exc:
            raise ZooKeeperUnavailable(f"could not create the chroot {chroot} in ZooKeeper: {exc!r}") from None
        finally:
            bootstrap.stop()
            bootstrap.close()
    return _started(hosts + chroot, session_timeout_ms, connection_timeout_ms)


def close(client: KazooClient) -> None:
    """End the session now, so this broker's ephemeral nodes vanish at once
    instead of after the session timeout."""
    try:
        client.stop()
    finally:
        client.close()
