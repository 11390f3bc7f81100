"""ZooKeeper members without a data plane (session, registration, image
watcher, controller), for tests that drive the controller exactly, and the
helpers those tests share (their fixtures ``start_members`` and ``admin`` are in
conftest.py), a broker's session as its acceptor lends it to a worker
(``LentSession``), and one worker's replica machinery wired to it (``worker``)."""

import contextlib
import itertools
import os

from kazoo.client import KazooClient

from harness.waiting import wait_for
from hpbroker.cluster import registration, session, znodes
from hpbroker.cluster.board_publisher import BoardPublisher
from hpbroker.cluster.controller import Controller, ControllerSettings
from hpbroker.cluster.shared_link import SharedLink
from hpbroker.cluster.watcher import ImageWatcher
from hpbroker.replication.fetcher import FetcherSettings
from hpbroker.shared.cluster_board import ClusterBoard
from hpbroker.storage import LogManager
from hpbroker.storage.config import LogConfig
from hpbroker.workers.cluster_topics import ClusterTopics
from hpbroker.workers.owner_calls import FollowerFetch
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.replicas import ReplicaManager, ReplicaSettings

SESSION_MS = 4000
WAIT_S = 20


_lent = itertools.count()


class LentSession:
    """A broker's one session as its acceptor holds it (the image watcher, the
    board it publishes to, the proxy) and one worker's ``SharedLink`` to it,
    in this process."""

    def __init__(self, connect: str, session_ms: int = SESSION_MS):
        self.client = session.connect(connect, session_ms, 10000)
        self.watcher = ImageWatcher(self.client)
        self.watcher.start()
        self.board = ClusterBoard(1, half_bytes=1 << 20)
        tag = f"test-{os.getpid()}-{next(_lent)}"
        self.publisher = BoardPublisher(self.client, self.watcher, self.board, session_ms, tag)
        self.link = SharedLink(self.board, 0, tag)

    def close(self) -> None:
        self.link.close()
        self.publisher.close()
        self.watcher.stop()
        session.close(self.client)


class Member:
    """One broker's cluster membership."""

    def __init__(self, connect: str, broker_id: int, settings=ControllerSettings()):
        self.broker_id = broker_id
        self.client = session.connect(connect, SESSION_MS, 10000)
        registration.ensure_layout(self.client)
        self.registration = registration.Registration(
            self.client, znodes.BrokerRegistration(broker_id, "127.0.0.1", 19000 + broker_id))
        self.registration.start()
        self.watcher = ImageWatcher(self.client)
        self.watcher.start()
        self.controller = Controller(self.client, broker_id, self.watcher, settings)
        self.controller.start()
        self.alive = True

    def leave(self) -> None:
        """A clean stop: the controller resigns, the session ends."""
        if self.alive:
            self.alive = False
            self.controller.stop()
            self.watcher.stop()
            self.registration.close()
            session.close(self.client)

    def crash(self, connect: str) -> None:
        """The session expires as if the broker died: nothing resigns."""
        self.alive = False
        twin = KazooClient(hosts=connect, client_id=self.client.client_id)
        twin.start(10)
        twin.stop()
        twin.close()
        self.controller.stop()
        self.watcher.stop()
        session.close(self.client)


def controller_of(admin) -> tuple[int, int]:
    data, _ = admin.get(znodes.CONTROLLER)
    epoch, _ = admin.get(znodes.CONTROLLER_EPOCH)
    return znodes.decode_controller(data), znodes.decode_controller_epoch(epoch)


def state(admin, topic, p):
    try:
        data, stat = admin.get(znodes.partition_state_path(topic, p))
    except Exception:
        return None
    return znodes.PartitionState.decode(topic, p, data, stat.version, stat.mzxid)


def create_topic(admin, topic, assignment):
    admin.create(znodes.topic_path(topic), znodes.TopicAssignment(topic, assignment, "id-" + topic).encode())


def wait_state(admin, topic, p, what, condition) -> znodes.PartitionState:
    wait_for(lambda: (s := state(admin, topic, p)) is not None and condition(s), WAIT_S, what)
    found = state(admin, topic, p)
    assert found is not None, f"{topic}-{p}'s state vanished"
    return found


def set_isr(admin, topic, p, isr):
    """What the leader writes when a follower has caught up (same epoch, version-checked)."""
    current = state(admin, topic, p)
    assert current is not None, f"{topic}-{p} has no state"
    admin.set(znodes.partition_state_path(topic, p), znodes.PartitionState(
        current.leader, current.leader_epoch, isr, current.controller_epoch).encode(), version=current.zk_version)


class Worker:
    """One worker's replica side, as a broker's worker wires it: its own
    session, real logs, the topics and roles fed by the image."""

    def __init__(self, link, logs, topics, replicas, partitions):
        self.link, self.logs, self.topics, self.replicas, self.partitions = link, logs, topics, replicas, partitions

    def leads(self, topic: str, partition: int) -> bool:
        return self.partitions.leads(topic, partition)

    def role(self, topic: str, partition: int):
        found = self.partitions.resolve(topic, partition)
        return getattr(found, "role", found)

    def follower_fetch(self, topic: str, partition: int, offset: int, replica: int, replica_epoch: int):
        """What the Fetch handler makes of a follower's fetch."""
        return self.partitions.follower_fetch(FollowerFetch(topic, partition, offset, 1 << 20, -1, replica,
                                                            replica_epoch))


@contextlib.asynccontextmanager
async def worker(connect: str, log_dir, broker_id: int = 1, lag_ms: int = 10000):
    lent = LentSession(connect)
    link = lent.link
    logs = LogManager([str(log_dir)], LogConfig(), replicated=True)
    topics = ClusterTopics([str(log_dir)], LogConfig(), link, default_replication_factor=2,
                           offsets_replication_factor=2)
    replicas = ReplicaManager(ReplicaSettings(broker_id, FetcherSettings(broker_id, backoff_ms=100), lag_ms,
                                              SESSION_MS), 0, 1, logs, link)
    partitions = Partitions(logs, topics, replicas=replicas)
    replicas.changed = partitions.changed

    def on_image(_image=None):
        image = link.image()
        topics.apply(image)
        replicas.apply(image)

    def on_session(session):
        replicas.set_session(session)
        on_image()
    on_image()
    link.publish_to(on_image, on_session)
    try:
        yield Worker(link, logs, topics, replicas, partitions)
    finally:
        await replicas.close()
        lent.close()
        logs.close()
