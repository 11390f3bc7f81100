"""Joining a cluster against a real ZooKeeper server."""

import threading
import time

import pytest
from kazoo.client import KazooClient

from harness.broker import free_port
from harness.waiting import wait_for
from harness.zookeeper import ZooKeeperServer, expire_session
from hpbroker.cluster import registration, session, znodes

SESSION_MS = 4000


@pytest.fixture
def connect_to(chroot):
    clients = []

    def make(session_timeout_ms: int = SESSION_MS) -> KazooClient:
        client = session.connect(chroot, session_timeout_ms, 10000)
        clients.append(client)
        return client

    yield make
    for client in clients:
        session.close(client)


def test_split_connect():
    assert session.split_connect("h1:1,h2:2/kafka/prod") == ("h1:1,h2:2", "/kafka/prod")
    assert session.split_connect("h1:1") == ("h1:1", "")
    assert session.split_connect("h1:1/") == ("h1:1", "")
    with pytest.raises(ValueError):
        session.split_connect("/chroot")


def test_an_unreachable_zookeeper_is_one_clear_error_after_the_connection_timeout():
    port = free_port()  # nothing listens there
    started = time.monotonic()
    with pytest.raises(session.ZooKeeperUnavailable, match=f"127.0.0.1:{port} within 1500 ms"):
        session.connect(f"127.0.0.1:{port}", SESSION_MS, 1500)
    assert 1.0 < time.monotonic() - started < 10


def test_the_chroot_is_created_and_everything_lives_under_it(zookeeper, chroot, connect_to):
    client = connect_to()
    registration.ensure_layout(client)
    root = KazooClient(hosts=zookeeper.connect)
    root.start(10)
    try:
        prefix = "/" + chroot.split("/", 1)[1]
        assert root.exists(prefix + "/brokers/ids") is not None
        assert root.exists(prefix + "/cluster") is not None
    finally:
        root.stop()
        root.close()


def test_the_first_broker_writes_the_cluster_id_and_the_others_adopt_it(connect_to):
    first, second = connect_to(), connect_to()
    assert registration.cluster_id(first, "first-id") == "first-id"
    assert registration.cluster_id(second, "second-id") == "first-id"
    registration.check_cluster_id(None, "first-id")
    registration.check_cluster_id("first-id", "first-id")
    with pytest.raises(registration.ClusterIdMismatch, match="meta.properties.*zookeeper.connect"):
        registration.check_cluster_id("other-id", "first-id")


def test_generated_broker_ids_are_unique_and_above_the_reserved_range(connect_to):
    client = connect_to()
    ids = [registration.generate_broker_id(client) for _ in range(3)]
    assert ids == [1001, 1002, 1003]
    assert registration.generate_broker_id(connect_to()) == 1004


def test_registration_is_ephemeral_and_a_live_duplicate_is_refused(connect_to):
    first, second = connect_to(), connect_to()
    member = registration.Registration(first, znodes.BrokerRegistration(1, "127.0.0.1", 19092, timestamp_ms=1))
    member.start()
    data, stat = second.get(znodes.broker_path(1))
    assert znodes.BrokerRegistration.decode(1, data).port == 19092
    assert stat.ephemeralOwner == first.client_id[0]

    impostor = registration.Registration(second, znodes.BrokerRegistration(1, "127.0.0.1", 19093))
    with pytest.raises(registration.BrokerIdInUse, match="broker.id 1 is registered by another live broker"):
        impostor.start()
    # the refused broker changed nothing
    assert znodes.BrokerRegistration.decode(1, second.get(znodes.broker_path(1))[0]).port == 19092

    session.close(first)  # a clean stop ends the session: the id is free at once
    impostor.start()
    assert znodes.BrokerRegistration.decode(1, second.get(znodes.broker_path(1))[0]).port == 19093


def test_a_restarted_broker_waits_for_its_crashed_predecessors_node(connect_to):
    """After a SIGKILL the dead process's node lives until its session expires:
    the restarted broker waits for that instead of calling its own id taken."""
    crashed, restarted = connect_to(), connect_to()
    registration.Registration(crashed, znodes.BrokerRegistration(6, "127.0.0.1", 19096)).start()
    successor = registration.Registration(restarted, znodes.BrokerRegistration(6, "127.0.0.1", 19097),
                                          stale_wait_s=30)
    expiry = threading.Timer(0.5, session.close, args=(crashed,))  # the old session ends meanwhile
    expiry.start()
    started = time.monotonic()
    successor.start()
    expiry.join()
    assert time.monotonic() - started < 30
    data, stat = restarted.get(znodes.broker_path(6))
    assert znodes.BrokerRegistration.decode(6, data).port == 19097
    assert stat.ephemeralOwner == restarted.client_id[0]

    # a live duplicate is still refused, once the wait is over
    impostor = registration.Registration(connect_to(), znodes.BrokerRegistration(6, "127.0.0.1", 19098),
                                         stale_wait_s=0.5)
    with pytest.raises(registration.BrokerIdInUse):
        impostor.start()


def test_a_broker_whose_session_expired_registers_again(zookeeper, connect_to):
    client, watcher = connect_to(), connect_to()
    lost, registered = [], []
    member = registration.Registration(client, znodes.BrokerRegistration(4, "127.0.0.1", 19094),
                                       on_lost=lambda: lost.append(1), on_registered=lambda: registered.append(1))
    member.start()
    assert registered == [1]
    session_id = client.client_id[0]
    expire_session(zookeeper.connect, client)
    wait_for(lambda: lost, 20, "the broker to notice its session is lost")
    wait_for(lambda: member.registered.is_set() and watcher.exists(znodes.broker_path(4)) is not None,
             20, "the broker to register again in a new session")
    assert registered == [1, 1]
    assert watcher.get(znodes.broker_path(4))[1].ephemeralOwner == client.client_id[0] != session_id


def test_a_broker_whose_id_was_taken_while_it_was_away_registers_once_it_is_free(zookeeper, connect_to, caplog):
    """A broker misconfigured with the same id starts while the first one's
    session has expired: the first is refused in its new session, keeps
    trying while that session stays, and is back once the impostor stops."""
    client, intruder_client, watcher = connect_to(), connect_to(), connect_to()
    intruder = registration.Registration(intruder_client, znodes.BrokerRegistration(8, "127.0.0.1", 19099))
    registered = []
    member = registration.Registration(client, znodes.BrokerRegistration(8, "127.0.0.1", 19098),
                                       # the intruder registers before this broker's new session is open
                                       on_lost=intruder.start, on_registered=lambda: registered.append(1),
                                       stale_wait_s=30)  # for a start's crashed predecessor, not here
    member.start()
    expire_session(zookeeper.connect, client)
    wait_for(lambda: any("could not register again" in r.getMessage() for r in caplog.records), 20,
             "the broker to be refused its id in its new session")
    data, stat = watcher.get(znodes.broker_path(8))
    assert znodes.BrokerRegistration.decode(8, data).port == 19099
    assert stat.ephemeralOwner == intruder_client.client_id[0]
    assert not member.registered.is_set() and registered == [1]

    session.close(intruder_client)  # the operator stops the impostor
    wait_for(lambda: member.registered.is_set(), 20, "the broker to register once its id is free")
    data, stat = watcher.get(znodes.broker_path(8))
    assert znodes.BrokerRegistration.decode(8, data).port == 19098
    assert stat.ephemeralOwner == client.client_id[0]
    assert registered == [1, 1]


def test_registration_survives_a_zookeeper_restart(tmp_path):
    server = ZooKeeperServer(tmp_path / "zk").start()
    try:
        client = session.connect(server.connect, 10000, 10000)
        member = registration.Registration(client, znodes.BrokerRegistration(5, "127.0.0.1", 19095))
        member.start()
        server.restart()  # shorter than the session timeout: the session lives on
        wait_for(lambda: client.connected and client.exists(znodes.broker_path(5)) is not None, 30,
                 "the registration to be there after ZooKeeper restarted")
        session.close(client)
    finally:
        server.stop()
