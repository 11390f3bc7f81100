"""The image's live brokers and ACLs, kept by ``ImageWatcher`` against a real ZooKeeper,
through sessions that expire and registrations that come back."""

import json

import pytest
from kazoo.exceptions import ConnectionLoss, NoNodeError, SessionExpiredError

from harness.waiting import wait_for
from harness.zookeeper import expire_session
from hpbroker.cluster import registration, session, znodes
from hpbroker.cluster.watcher import ImageWatcher
from hpbroker.security.acls import PatternType, Resource, ResourceType

SESSION_MS = 4000
WAIT_S = 20


@pytest.fixture
def sessions(chroot):
    clients, watchers = [], []

    def make(watched: bool = False):
        client = session.connect(chroot, SESSION_MS, 10000)
        clients.append(client)
        if not watched:
            return client
        watcher = ImageWatcher(client)
        watcher.start()
        watchers.append(watcher)
        return client, watcher

    yield make
    for watcher in watchers:
        watcher.stop()
    for client in clients:
        session.close(client)


def registered_epoch(client, broker_id: int) -> int:
    """The epoch of the node ``broker_id`` holds now; -1 while it has none, or
    while ``client``'s session is being replaced."""
    try:
        return client.get(znodes.broker_path(broker_id))[1].czxid
    except (NoNodeError, SessionExpiredError, ConnectionLoss):
        return -1


def test_a_broker_list_read_before_a_re_registration_does_not_drop_the_new_one(zookeeper, sessions):
    """The list of ``/brokers/ids`` and each broker's node come through different
    watches, on different threads: a list read while broker 7 was away can be
    delivered after the watch of its node has delivered its new registration.
    Broker 7 must stay in the image, at its new epoch. (It was dropped for good:
    a broker missing from its own image fetched as no incarnation, and no
    leader let it back into an ISR.)"""
    member_client = sessions()
    _client, watcher = sessions(watched=True)
    member = registration.Registration(member_client, znodes.BrokerRegistration(7, "127.0.0.1", 19107))
    member.start()
    first = registered_epoch(member_client, 7)
    wait_for(lambda: 7 in watcher.image().brokers, WAIT_S, "the watcher to see broker 7")

    expire_session(zookeeper.connect, member_client)
    wait_for(lambda: (b := watcher.image().brokers.get(7)) is not None and b.epoch > first, WAIT_S,
             "the watcher to see broker 7's new registration")
    # what a list read between the expiry and the new registration would have said, late
    watcher._on_broker_ids([])
    watcher._on_broker_ids(member_client.get_children(znodes.BROKER_IDS))
    assert watcher.image().brokers[7].epoch == registered_epoch(member_client, 7)

    member.close()  # a broker that leaves goes from the image by its own node's watch
    wait_for(lambda: 7 not in watcher.image().brokers, WAIT_S, "broker 7 to leave the image")


def test_a_broker_sees_itself_again_after_each_of_its_sessions_expires(zookeeper, sessions):
    """The acceptor's case: registration and watcher share the session, so on a
    new session the list, the node's watch and the registration race each
    other. Each time, the image must end with this broker at the epoch of the
    node it holds now: that is the incarnation its fetches name."""
    client, watcher = sessions(watched=True)
    member = registration.Registration(client, znodes.BrokerRegistration(8, "127.0.0.1", 19108))
    member.start()
    for _ in range(5):
        before = registered_epoch(client, 8)
        wait_for(lambda: (b := watcher.image().brokers.get(8)) is not None and b.epoch == before, WAIT_S,
                 "the image to hold this broker's registration")
        expire_session(zookeeper.connect, client)
        wait_for(lambda: member.registered.is_set() and registered_epoch(client, 8) > before, WAIT_S,
                 "this broker to register again")
        now = registered_epoch(client, 8)
        wait_for(lambda: (b := watcher.image().brokers.get(8)) is not None and b.epoch == now, WAIT_S,
                 "the image to hold this broker's new registration")


def test_a_partition_state_read_before_a_re_read_does_not_replace_it(sessions):
    """A partition's state comes through its node's watch, and again through
    ``reread_states`` (after a reconnect, or when a worker doubts its
    leaderships) on another thread: the watch's read of an older state can be
    delivered after the re-read applied a newer one.  The image keeps the
    newer one (a worker would otherwise act on a leadership already ended),
    and a topic deleted and made again, whose state's version starts over,
    still shows its new state."""
    writer = sessions()
    _client, watcher = sessions(watched=True)
    path = znodes.partition_state_path("moved", 0)

    def write_topic() -> None:
        writer.create(znodes.topic_path("moved"), znodes.TopicAssignment("moved", {0: [1, 2]}).encode(),
                      makepath=True)
        writer.create(path, znodes.PartitionState(1, 0, [1, 2], 1).encode(), makepath=True)

    def leader() -> int:
        found = watcher.image().states.get(("moved", 0))
        return -1 if found is None else found.leader

    write_topic()
    wait_for(lambda: leader() == 1, WAIT_S, "the watcher to see broker 1 lead")
    old_data, old_stat = writer.get(path)
    writer.set(path, znodes.PartitionState(2, 1, [2], 1).encode())
    watcher.reread_states()
    assert leader() == 2
    watcher._state_watch("moved", 0)(old_data, old_stat)  # the watch's older read, delivered late
    assert leader() == 2

    writer.delete(znodes.topic_path("moved"), recursive=True)
    wait_for(lambda: "moved" not in watcher.image().topics, WAIT_S, "the watcher to see the topic deleted")
    write_topic()  # the state's node is new: version 0 again, and a newer zxid
    wait_for(lambda: leader() == 1, WAIT_S, "the watcher to see the topic made again")


def test_acls_follow_their_znodes_even_when_one_is_made_again_at_once(sessions):
    """Each resource pattern's znode is watched: a change shows in the image
    with a new ACL version; a znode deleted and made again straight away (a
    last ACL removed, then a new one added) is still followed."""
    writer = sessions()
    _client, watcher = sessions(watched=True)
    path = znodes.acl_path("Topic", "orders", False)

    def entries(*operations: str) -> bytes:
        return json.dumps({"version": 1, "acls": [{"principal": "User:app", "permissionType": "Allow",
                                                   "operation": op, "host": "*"} for op in operations]}).encode()

    def operations() -> set:
        found = watcher.image().acls.get(Resource(ResourceType.TOPIC, "orders", PatternType.LITERAL), ())
        return {entry.operation.name for entry in found}

    writer.create(path, entries("Read"))
    wait_for(lambda: operations() == {"READ"}, WAIT_S, "the watcher to see the ACL")
    version = watcher.image().acl_version
    writer.set(path, entries("Read", "Write"))
    wait_for(lambda: operations() == {"READ", "WRITE"}, WAIT_S, "the watcher to see the change")
    assert watcher.image().acl_version > version
    for _ in range(5):
        writer.delete(path)
        writer.create(path, entries("Describe"))
    wait_for(lambda: operations() == {"DESCRIBE"}, WAIT_S, "the watcher to follow the znode made again")
    writer.delete(path)
    wait_for(lambda: operations() == set(), WAIT_S, "the watcher to see the ACLs gone")
    prefixed = znodes.acl_path("Group", "billing-", True)
    writer.create(prefixed, entries("Read"), makepath=True)
    wait_for(lambda: Resource(ResourceType.GROUP, "billing-", PatternType.PREFIXED) in watcher.image().acls,
             WAIT_S, "the watcher to see a prefixed ACL")
