"""The acceptor's part in cluster mode: join before serving, hand leaderships
over before stopping, leave last.

The acceptor holds the broker's one ZooKeeper session: its registration,
its controller candidacy, and the watches behind the cluster image, which it
lends to the workers (the image and the session's state on the cluster
board in shared memory, their writes through a proxy), so no kazoo object or
thread of this process is ever used in a child.  Joining comes before the
log directories are opened for writing: a wrong cluster id or a broker id
held by a live broker stops the start with one line, and a generated id is
known before ``meta.properties`` is written.

A controlled shutdown runs on a thread while the acceptor's loop keeps
serving: the workers must go on answering (NOT_LEADER_OR_FOLLOWER, so
producers re-route) while the controller moves the leaderships away.
"""

from __future__ import annotations

import logging
import threading

from hpbroker.cluster.board_publisher import BoardPublisher
from hpbroker.cluster.controller import ControllerSettings
from hpbroker.cluster.member import ClusterMember, MemberSettings
from hpbroker.cluster.znodes import Endpoint
from hpbroker.server.config import BrokerConfig
from hpbroker.storage import checkpoints

log = logging.getLogger(__name__)


def member_settings(config: BrokerConfig) -> MemberSettings:
    session_ms = config["zookeeper.session.timeout.ms"]
    advertised = config.inter_broker_endpoint
    others = tuple(Endpoint(a.name, a.host, a.port, config.securities[a.name].protocol)
                   for a in config.advertised if a.name != advertised.name)
    # broker.id given explicitly pins the id; otherwise the stored one, else a generated one (Kafka's -1)
    explicit = "broker.id" in config.props or "node.id" in config.props
    return MemberSettings(
        zookeeper_connect=config["zookeeper.connect"], session_timeout_ms=session_ms,
        connection_timeout_ms=config["zookeeper.connection.timeout.ms"] or session_ms,
        broker_id=config.broker_id if explicit and config.broker_id >= 0 else None,
        generate_broker_id=config["broker.id.generation.enable"], host=advertised.host, port=advertised.port,
        rack=config["broker.rack"], listener=advertised.name, security_protocol=config.security.protocol,
        other_endpoints=others,
        controller=ControllerSettings(
            unclean_leader_election=config.log.unclean_leader_election,
            auto_leader_rebalance=config["auto.leader.rebalance.enable"],
            imbalance_check_interval_s=config["leader.imbalance.check.interval.seconds"],
            imbalance_per_broker_percentage=config["leader.imbalance.per.broker.percentage"]))


def join(config: BrokerConfig, stored_broker_id: int | None, stored_cluster_id: str | None) -> ClusterMember:
    """A registered member (ClusterJoinError with a one-line reason)."""
    member = ClusterMember(member_settings(config))
    try:
        member.join(stored_broker_id, stored_cluster_id, checkpoints.kafka_uuid_string(checkpoints.new_kafka_uuid()))
    except BaseException:  # ^C while joining too: no registration is left for the session timeout
        member.close()
        raise
    log.info("joined cluster %s as broker %d (ZooKeeper %s)", member.cluster_id, member.broker_id,
             config["zookeeper.connect"])
    return member


def lend_session(member: ClusterMember, config: BrokerConfig, board, broker_tag: str) -> BoardPublisher:
    """Publish the member's image and session to the workers, and serve their
    ZooKeeper operations on its session (before the first worker is forked)."""
    assert member.client is not None and member.watcher is not None, "not joined"
    return BoardPublisher(member.client, member.watcher, board, config["zookeeper.session.timeout.ms"], broker_tag)


def shutdown_timeout_s(config: BrokerConfig) -> float:
    """How long a controlled shutdown may wait for the controller: Kafka's
    retries times their back-off, and never less than a session timeout."""
    retries = max(1, config["controlled.shutdown.max.retries"])
    return max(retries * config["controlled.shutdown.retry.backoff.ms"], config["zookeeper.session.timeout.ms"]) / 1000


class HandOver:
    """A controlled shutdown in the background; ``done`` runs when it ends."""

    def __init__(self, member: ClusterMember, timeout_s: float, done):
        self.finished = False
        self._thread = threading.Thread(target=self._run, args=(member, timeout_s, done), name="controlled-shutdown",
                                        daemon=True)
        self._thread.start()

    def _run(self, member: ClusterMember, timeout_s: float, done) -> None:
        try:
            moved = member.controlled_shutdown(timeout_s)
            log.info("controlled shutdown %s", "complete: no leaderships left" if moved else
                     f"gave up after {timeout_s:.0f} s; stopping anyway")
        except Exception:  # noqa: BLE001 - the stop goes on regardless
            log.exception("controlled shutdown failed; stopping anyway")
        finally:
            self.finished = True
            done()
