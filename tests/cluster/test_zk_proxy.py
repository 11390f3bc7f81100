"""The broker's one ZooKeeper session lent to its workers (``cluster/zk_proxy.py``,
``cluster/board_publisher.py``, ``cluster/shared_link.py``), against a real
ZooKeeper: operations made through the proxy answer as kazoo's own would,
node races included; a re-read publishes a fresher image; a connection that
sends junk is closed alone; an image too large for the board is refused
without stopping the board; and a broker of three workers holds one session."""

import asyncio
import logging
import os
import socket
import struct

import pytest
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from harness.broker import Broker
from harness.waiting import until, wait_for
from harness.zookeeper import four_letter
from hpbroker.cluster import session, znodes
from hpbroker.cluster.board_publisher import BoardPublisher, encode_image
from hpbroker.cluster.watcher import ImageWatcher
from hpbroker.cluster.zk_ops import proxy_address
from hpbroker.cluster.zk_proxy import ProxyOps
from hpbroker.shared.cluster_board import ClusterBoard
from tests.cluster.members import SESSION_MS, LentSession


@pytest.fixture
def lent(chroot):
    found = LentSession(chroot)
    yield found
    found.close()


def test_operations_through_the_proxy_answer_as_zookeeper_does(lent):
    zk = lent.link.zk

    async def scenario():
        await zk.create("/a/b", b"one", makepath=True)
        data, stat = await zk.get("/a/b")
        assert (data, stat.version) == (b"one", 0)
        with pytest.raises(NodeExistsError):
            await zk.create("/a/b", b"again")
        written = await zk.set("/a/b", b"two", version=0)
        assert written.version == 1 and written.mzxid > stat.mzxid
        with pytest.raises(BadVersionError):
            await zk.set("/a/b", b"stale", version=0)
        with pytest.raises(NoNodeError):
            await zk.get("/a/missing")
        assert await zk.exists("/a/b") and not await zk.exists("/a/missing")
        await zk.ensure_path("/a/c/d")
        assert sorted(await zk.children("/a")) == ["b", "c"]
        # a transaction: all or nothing, the failed operation named by its error
        results = await zk.multi([("create", "/a/e", b"e"), ("set", "/a/b", b"three", 0)])
        assert isinstance(results[1], BadVersionError) and isinstance(results[0], Exception)
        assert not await zk.exists("/a/e")
        assert await zk.multi([("create", "/a/e", b"e"), ("set", "/a/b", b"three", 1),
                               ("delete", "/a/c/d", 0)]) == [True, True, True]
        assert (await zk.get("/a/b"))[0] == b"three" and not await zk.exists("/a/c/d")
    asyncio.run(scenario())
    assert lent.client.get("/a/e")[0] == b"e"  # made on the broker's session, seen by everyone
    asyncio.run(scenario_on_a_new_loop(zk))


async def scenario_on_a_new_loop(zk):
    """The same link, used from another event loop later (a test's second run)."""
    assert (await zk.get("/a/e"))[0] == b"e"


def test_a_reread_publishes_an_image_at_least_as_fresh(lent):
    link = lent.link
    before = lent.board.read()
    assert before is not None

    async def scenario():
        await link.confirm()
    asyncio.run(scenario())
    after = lent.board.read()
    assert after is not None and after.generation > before.generation
    assert link.tracked()


def test_a_connection_sending_junk_is_closed_alone(lent, caplog):
    caplog.set_level(logging.WARNING, logger="hpbroker.cluster.zk_proxy")
    address = lent.link.zk.address
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as junk:
        junk.connect(address)
        body = b"\xc1not msgpack"
        junk.sendall(struct.pack(">I", len(body)) + body)
        junk.settimeout(10)
        assert junk.recv(1) == b""  # closed
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as huge:
        huge.connect(address)
        huge.sendall(struct.pack(">I", 1 << 30))
        huge.settimeout(10)
        assert huge.recv(1) == b""
    wait_for(lambda: "no ZooKeeper request" in caplog.text and "closing its connection" in caplog.text, 10,
             "the proxy to log why it closed the connections")

    async def still_served():
        await lent.link.zk.ensure_path("/still")
        return await lent.link.zk.exists("/still")
    assert asyncio.run(still_served())


def test_a_proxy_out_of_reach_is_zookeeper_trouble():
    async def scenario():
        with pytest.raises(KazooException, match="out of reach"):
            await ProxyOps("no-such-broker").get("/x")
    asyncio.run(scenario())
    assert proxy_address("7") == "\0hpbroker-7-zookeeper"


def zookeeper_connections(port: int) -> int:
    """Sessions ZooKeeper holds now (``cons`` lists one ``sid=`` per session)."""
    return four_letter(port, b"cons").decode().count("sid=")


def test_a_broker_with_three_workers_holds_one_zookeeper_session(zookeeper, chroot, tmp_path):
    base = zookeeper_connections(zookeeper.port)
    broker = Broker(tmp_path / "broker", overrides={"zookeeper.connect": chroot, "broker.id": "1",
                                                    "num.workers": "3"})
    broker.start()
    try:
        asyncio.run(until(lambda: zookeeper_connections(zookeeper.port) == base + 1,
                          "ZooKeeper to hold one more session: the broker's", timeout=20))
        assert len(broker.worker_pids()) == 3
    finally:
        broker.stop()


def test_an_image_too_large_for_the_board_keeps_the_last_one_and_the_session_told(chroot, caplog):
    """The acceptor's publisher logs it, the workers keep the last image that
    fitted, and the board goes on moving (session news, renewals)."""
    caplog.set_level(logging.ERROR, logger="hpbroker.cluster.board_publisher")
    client = session.connect(chroot, SESSION_MS, 10000)
    watcher = ImageWatcher(client)
    watcher.start()
    board = ClusterBoard(1, half_bytes=len(encode_image(watcher.image())) + 200)
    publisher = BoardPublisher(client, watcher, board, SESSION_MS, f"too-large-{os.getpid()}")
    try:
        first = board.read()
        assert first is not None and first.image is not None
        client.create(znodes.topic_path("big"), znodes.TopicAssignment("big", {p: [1] for p in range(50)}).encode(),
                      makepath=True)
        wait_for(lambda: "the workers keep the last one that fitted" in caplog.text, 20, "the publisher to refuse it")
        now = board.read()
        assert now is not None and now.generation > first.generation and now.image == first.image
        assert board.tracked()
    finally:
        publisher.close()
        watcher.stop()
        session.close(client)
