"""The intra-broker channel (``hpbroker/workers/peers.py``): a PeerServer and a
PeerClient over a real abstract Unix socket, in one event loop; for a worker
that dies or restarts, the server runs in a child process that is killed.

Each test uses its own broker tag, so its socket names cannot meet another
test's (or a running broker's).  Nothing sleeps: a test waits on futures,
events its target sets and lines the child prints, each under a timeout."""

import asyncio
import itertools
import logging
import os
import sys

import pytest

from hpbroker.workers.peers import PeerClient, PeerServer, PeerUnavailable, RemoteServices, UnknownRemoteMethod

TIMEOUT_S = 5
_tags = itertools.count()


def unique_tag() -> str:
    return f"test-peers-{os.getpid()}-{next(_tags)}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


class Target:
    """What a worker's PartitionService is to the channel: declared methods,
    plain or coroutine."""

    REMOTE_METHODS = frozenset({"add", "echo", "wait_for", "fail", "fail_later"})

    def __init__(self):
        self.gates: dict[str, asyncio.Event] = {}
        self.entered: dict[str, asyncio.Event] = {}

    def add(self, a, b):
        return a + b

    async def echo(self, value):
        await asyncio.sleep(0)
        return value

    async def wait_for(self, name):
        """Answers ``name`` once the test opens that gate; says when it got the call."""
        self.entered.setdefault(name, asyncio.Event()).set()
        await self.gates.setdefault(name, asyncio.Event()).wait()
        return name

    def fail(self, why):
        raise ValueError(why)

    async def fail_later(self, why):
        await asyncio.sleep(0)
        raise KeyError(why)

    def undeclared(self):
        return "never called by a peer"


class Groups:
    REMOTE_METHODS = frozenset({"describe"})

    def describe(self, group_id):
        return ("Stable", group_id, [b"member"])


async def serving(tag: str, index: int = 0) -> tuple[PeerServer, Target]:
    target = Target()
    server = PeerServer(tag, index, RemoteServices({"target": target, "groups": Groups()}))
    await server.start()
    return server, target


async def entered(target: Target, name: str) -> None:
    await asyncio.wait_for(target.entered.setdefault(name, asyncio.Event()).wait(), TIMEOUT_S)


def test_a_call_returns_the_result_of_plain_and_coroutine_methods_of_each_service():
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag, 3)
        client = PeerClient(tag)
        try:
            assert await asyncio.wait_for(client.call(3, "target.add", 2, 40), TIMEOUT_S) == 42
            assert await asyncio.wait_for(client.call(3, "target.echo", {"k": (1, b"v")}), TIMEOUT_S) == \
                {"k": (1, b"v")}
            assert await asyncio.wait_for(client.call(3, "groups.describe", "g"), TIMEOUT_S) == \
                ("Stable", "g", [b"member"])
        finally:
            client.close()
            server.close()
    run(scenario())


def test_concurrent_calls_complete_out_of_order_matched_by_id():
    async def scenario():
        tag = unique_tag()
        server, target = await serving(tag)
        client = PeerClient(tag)
        try:
            slow = asyncio.ensure_future(client.call(0, "target.wait_for", "slow"))
            await entered(target, "slow")
            fast = asyncio.ensure_future(client.call(0, "target.wait_for", "fast"))
            await entered(target, "fast")
            target.gates["fast"].set()
            assert await asyncio.wait_for(fast, TIMEOUT_S) == "fast"
            assert not slow.done()  # the later call was answered first, on the same connection
            target.gates["slow"].set()
            assert await asyncio.wait_for(slow, TIMEOUT_S) == "slow"
            many = await asyncio.wait_for(asyncio.gather(*(client.call(0, "target.echo", i) for i in range(50))),
                                          TIMEOUT_S)
            assert many == list(range(50))
        finally:
            client.close()
            server.close()
    run(scenario())


UNDECLARED = ["target.undeclared", "target.__init__", "target.gates", "target", "add", "groups.describe.__globals__",
              "nobody.add"]


def test_an_exception_in_the_target_or_an_undeclared_method_comes_back_and_the_server_keeps_serving(caplog):
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag)
        client = PeerClient(tag)
        try:
            with pytest.raises(RuntimeError, match="ValueError: disk on fire"):
                await asyncio.wait_for(client.call(0, "target.fail", "disk on fire"), TIMEOUT_S)
            with pytest.raises(RuntimeError, match="KeyError"):
                await asyncio.wait_for(client.call(0, "target.fail_later", "gone"), TIMEOUT_S)
            for name in UNDECLARED:  # only what a service declares is reachable, not any attribute path
                with pytest.raises(RuntimeError, match="UnknownRemoteMethod: .* is not a remote method"):
                    await asyncio.wait_for(client.call(0, name), TIMEOUT_S)
            assert await asyncio.wait_for(client.call(0, "target.add", 1, 1), TIMEOUT_S) == 2
        finally:
            client.close()
            server.close()
    with caplog.at_level(logging.ERROR, logger="hpbroker.workers.peers"):
        run(scenario())
    assert [r.getMessage() for r in caplog.records] == [
        "peer call target.fail failed", "peer call target.fail_later failed",
        *(f"peer call refused: {name!r} is not a remote method" for name in UNDECLARED)]


def test_services_are_looked_up_by_name_and_undeclared_methods_refused_in_process_too():
    target, groups = Target(), Groups()
    services = RemoteServices({"target": target, "groups": groups})
    assert services["groups"] is groups
    assert services.method("target.add")(1, 2) == 3
    with pytest.raises(UnknownRemoteMethod):
        services.method("target.undeclared")


def test_a_declared_method_that_does_not_exist_fails_at_construction():
    class Typo:
        REMOTE_METHODS = frozenset({"apend"})

    with pytest.raises(AttributeError, match="apend"):
        RemoteServices({"partitions": Typo()})


def test_a_call_to_a_worker_that_is_not_listening_is_unavailable():
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag, 0)
        client = PeerClient(tag)
        try:
            with pytest.raises(PeerUnavailable, match="worker 1 is not reachable"):
                await asyncio.wait_for(client.call(1, "target.add", 1, 2), TIMEOUT_S)
            assert await asyncio.wait_for(client.call(0, "target.add", 1, 2), TIMEOUT_S) == 3  # others unaffected
        finally:
            client.close()
            server.close()
    run(scenario())


# A worker that dies or restarts is another process whose sockets all close;
# the tests below run the server in a child process and kill it, as happens.
CHILD = """
import asyncio, os, sys
from hpbroker.workers.peers import PeerServer, RemoteServices

class Target:
    REMOTE_METHODS = frozenset({"pid", "hang"})

    def pid(self):
        return os.getpid()

    async def hang(self):
        print("hanging", flush=True)
        await asyncio.Event().wait()

async def main():
    server = PeerServer(sys.argv[1], int(sys.argv[2]), RemoteServices({"target": Target()}))
    await server.start()
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


class ChildWorker:
    """A PeerServer in a process of its own."""

    def __init__(self, process):
        self.process = process

    @classmethod
    async def start(cls, tag: str, index: int) -> "ChildWorker":
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, tag, str(index), stdout=asyncio.subprocess.PIPE, cwd=root,
            env={**os.environ, "PYTHONPATH": root})
        child = cls(process)
        await child.said("ready")
        return child

    async def said(self, line: str) -> None:
        got = await asyncio.wait_for(self.process.stdout.readline(), TIMEOUT_S)
        assert got.decode().strip() == line

    async def kill(self) -> None:
        self.process.kill()
        await asyncio.wait_for(self.process.wait(), TIMEOUT_S)


def test_a_worker_that_dies_mid_call_fails_the_call_as_unavailable():
    async def scenario():
        tag = unique_tag()
        child = await ChildWorker.start(tag, 2)
        client = PeerClient(tag)
        try:
            pending = asyncio.ensure_future(client.call(2, "target.hang"))
            await child.said("hanging")  # the call is in the worker's hands
            await child.kill()
            with pytest.raises(PeerUnavailable):
                await asyncio.wait_for(pending, TIMEOUT_S)
            with pytest.raises(PeerUnavailable, match="worker 2 is not reachable"):
                await asyncio.wait_for(client.call(2, "target.pid"), TIMEOUT_S)
        finally:
            client.close()
            if child.process.returncode is None:
                await child.kill()
    run(scenario())


def test_the_client_reconnects_to_a_restarted_worker():
    async def scenario():
        tag = unique_tag()
        first = await ChildWorker.start(tag, 0)
        client = PeerClient(tag)
        second = None
        try:
            assert await asyncio.wait_for(client.call(0, "target.pid"), TIMEOUT_S) == first.process.pid
            await first.kill()
            second = await ChildWorker.start(tag, 0)
            # the old channel saw its end of file while the new process started
            assert await asyncio.wait_for(client.call(0, "target.pid"), TIMEOUT_S) == second.process.pid
        finally:
            client.close()
            for child in (first, second):
                if child is not None and child.process.returncode is None:
                    await child.kill()
    run(scenario())


def test_a_closed_server_takes_no_new_channels():
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag, 1)
        server.close()
        client = PeerClient(tag)
        try:
            with pytest.raises(PeerUnavailable, match="worker 1 is not reachable"):
                await asyncio.wait_for(client.call(1, "target.add", 1, 2), TIMEOUT_S)
        finally:
            client.close()
    run(scenario())


def test_a_closed_client_fails_its_pending_calls():
    async def scenario():
        tag = unique_tag()
        server, target = await serving(tag)
        client = PeerClient(tag)
        try:
            pending = asyncio.ensure_future(client.call(0, "target.wait_for", "never"))
            await entered(target, "never")
            client.close()
            with pytest.raises(PeerUnavailable):
                await asyncio.wait_for(pending, TIMEOUT_S)
        finally:
            target.gates["never"].set()
            server.close()
    run(scenario())
