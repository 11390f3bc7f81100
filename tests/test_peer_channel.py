"""The intra-broker channel (``hpbroker/workers/peers.py``) and the owner client
(``owners.py``): a PeerServer and a PeerClient over a real abstract Unix socket,
in one event loop; for a worker that dies or restarts, the server runs in a
child process that is killed.

Each test uses its own broker tag, so its socket names cannot meet another
test's (or a running broker's).  Nothing sleeps: a test waits on futures,
events its target sets and lines the child prints, each under a timeout."""

import asyncio
import itertools
import logging
import os
import struct
import sys
from typing import Any, TypeVar

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.shared.payload_arena import PayloadArena
from hpbroker.workers import owner_calls, peers
from hpbroker.workers.owner_calls import (
    Append,
    AppendResult,
    Done,
    Failed,
    Heartbeat,
    ListedOffset,
    ListOffset,
    PartitionBounds,
    PartitionBoundsResult,
)
from hpbroker.workers.owners import LocalOwner, Owners
from hpbroker.workers.peers import PeerClient, PeerServer, PeerUnavailable, socket_name

TIMEOUT_S = 5
_tags = itertools.count()
R = TypeVar("R")


def unique_tag() -> str:
    return f"test-peers-{os.getpid()}-{next(_tags)}"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


class Target:
    """What a worker's services are to the channel: call type -> a method,
    plain or coroutine."""

    def __init__(self):
        self.gates: dict[str, asyncio.Event] = {}
        self.entered: dict[str, asyncio.Event] = {}
        self.tasks: list = []  # per ListOffset, the task it was answered in (None: the read callback)

    def handlers(self) -> dict:
        return {Append: self.append, ListOffset: self.list_offset, Heartbeat: self.wait_for}

    def append(self, call: Append) -> AppendResult:
        return AppendResult(ErrorCode.none, base_offset=len(call.records))

    def list_offset(self, call: ListOffset) -> ListedOffset:
        self.tasks.append(asyncio.current_task())
        if call.timestamp == -99:
            raise ValueError("disk on fire")
        if call.timestamp == -98:
            raise OSError(28, "No space left on device")
        return ListedOffset(ErrorCode.none, offset=call.timestamp)

    async def wait_for(self, call: Heartbeat) -> Done:
        """Answers once the test opens the gate named by the member id; says when it got the call."""
        name = call.member_id
        self.entered.setdefault(name, asyncio.Event()).set()
        await self.gates.setdefault(name, asyncio.Event()).wait()
        return Done(ErrorCode.none)


async def serving(tag: str, index: int = 0) -> tuple[PeerServer, Target]:
    target = Target()
    server = PeerServer(tag, index, LocalOwner(target.handlers()))
    await server.start()
    return server, target


async def entered(target: Target, name: str) -> None:
    await asyncio.wait_for(target.entered.setdefault(name, asyncio.Event()).wait(), TIMEOUT_S)


async def ask(owners: Owners, call, worker: int, result_type: type[R]) -> R:
    """``owners.ask(call, worker)``, checked to be a ``result_type``."""
    result = await owners.ask(call, worker)
    assert isinstance(result, result_type)
    return result


def test_a_call_returns_its_result_typed_as_declared():
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag, 3)
        client = PeerClient(tag)
        try:
            answer = await asyncio.wait_for(client.call(3, Append("t", 0, b"abc", -1)), TIMEOUT_S)
            assert answer == AppendResult(ErrorCode.none, base_offset=3)
            assert isinstance(answer.error, ErrorCode)
        finally:
            client.close()
            server.close()
    run(scenario())


def test_a_call_that_waits_for_nothing_is_answered_in_the_read_callback_and_one_that_waits_in_a_task():
    """The owner starts each call where its frame was read: one that finishes
    there costs no task and no turn of the loop; one that waits goes on in a
    task and is answered when it is done, while calls behind it are answered."""
    async def scenario():
        tag = unique_tag()
        server, target = await serving(tag)
        client = PeerClient(tag)
        try:
            waiting = asyncio.ensure_future(client.call(0, Heartbeat("g", 1, "waits")))
            await entered(target, "waits")
            answers = await asyncio.wait_for(
                asyncio.gather(*(client.call(0, ListOffset("t", 0, i)) for i in range(3))), TIMEOUT_S)
            assert [a.offset for a in answers] == [0, 1, 2] and not waiting.done()
            assert target.tasks == [None, None, None]
            target.gates["waits"].set()
            assert await asyncio.wait_for(waiting, TIMEOUT_S) == Done(ErrorCode.none)
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
            slow = asyncio.ensure_future(client.call(0, Heartbeat("g", 1, "slow")))
            await entered(target, "slow")
            fast = asyncio.ensure_future(client.call(0, Heartbeat("g", 1, "fast")))
            await entered(target, "fast")
            target.gates["fast"].set()
            assert await asyncio.wait_for(fast, TIMEOUT_S) == Done(ErrorCode.none)
            assert not slow.done()  # the later call was answered first, on the same connection
            target.gates["slow"].set()
            assert await asyncio.wait_for(slow, TIMEOUT_S) == Done(ErrorCode.none)
            many = await asyncio.wait_for(asyncio.gather(*(client.call(0, ListOffset("t", 0, i)) for i in range(50))),
                                          TIMEOUT_S)
            assert [m.offset for m in many] == list(range(50))
        finally:
            client.close()
            server.close()
    run(scenario())


def test_a_failure_reads_the_same_from_a_peer_and_from_this_worker(caplog):
    """A bug is UNKNOWN_SERVER_ERROR, a disk error KAFKA_STORAGE_ERROR, a call
    nobody serves UNKNOWN_SERVER_ERROR: through the channel and in process alike,
    and the owner keeps serving."""
    async def scenario():
        tag = unique_tag()
        server, target = await serving(tag, 1)
        client = PeerClient(tag)
        local = LocalOwner(target.handlers())
        try:
            for here in (0, 1):
                owners = Owners(here, 2, local if here == 1 else LocalOwner({}), client, 50)
                failed = await ask(owners, ListOffset("t", 0, -99), 1, ListedOffset)
                assert failed.error == ErrorCode.unknown_server_error
                on_disk = await ask(owners, ListOffset("t", 0, -98), 1, ListedOffset)
                assert on_disk.error == ErrorCode.kafka_storage_error
                assert (await owners.ask(PartitionBounds("t", 0), 1)) == PartitionBoundsResult(
                    ErrorCode.unknown_server_error)
                assert (await ask(owners, ListOffset("t", 0, 7), 1, ListedOffset)).offset == 7
        finally:
            client.close()
            server.close()
    with caplog.at_level(logging.ERROR):
        run(scenario())
    assert sum("ListOffset failed on its owner" in r.getMessage() for r in caplog.records) == 4


def test_frames_that_are_no_owner_call_are_refused_and_the_channel_serves_on(caplog):
    """What arrives is decoded as the declared types only: a result sent as a
    call, an unknown tag, a field of the wrong type, bytes that are no frame at
    all.  Each is answered Failed when its call id can be read, dropped
    otherwise, and the next call on the same connection is answered."""
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag)
        reader, writer = await asyncio.open_unix_connection(socket_name(tag, 0))
        not_a_partition: Any = "zero"  # the wrong type on purpose: the receiver must refuse it
        try:
            bad = [owner_calls.encode(1, AppendResult(ErrorCode.none)),
                   owner_calls.encode(2, {"not": "a call"}),
                   owner_calls.encode(3, Append("t", not_a_partition, b"", 1)),
                   b"\xc1\xc1\xc1"]
            for body in bad + [owner_calls.encode(4, ListOffset("t", 0, 5))]:
                writer.write(struct.pack(">I", len(body)) + body)
            answers = {}
            for _ in range(4):
                size = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), TIMEOUT_S))[0]
                call_id, result = owner_calls.decode_result(await reader.readexactly(size))
                answers[call_id] = result
            assert all(isinstance(answers[i], Failed) for i in (1, 2, 3))
            assert answers[4] == ListedOffset(ErrorCode.none, offset=5)
        finally:
            writer.close()
            server.close()
    with caplog.at_level(logging.ERROR, logger="hpbroker.workers.peers"):
        run(scenario())
    assert sum(r.getMessage().startswith("peer call refused") for r in caplog.records) == 4


def test_frames_split_anywhere_and_run_together_are_each_answered():
    """Calls written a byte at a time, and several in one write, are answered
    each once, as their frames complete."""
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag)
        reader, writer = await asyncio.open_unix_connection(socket_name(tag, 0))
        try:
            frames = b"".join(struct.pack(">I", len(body)) + body
                              for body in (owner_calls.encode(i, ListOffset("t", 0, i)) for i in range(5)))
            first, rest = frames[:len(frames) // 2], frames[len(frames) // 2:]
            for i in range(len(first)):
                writer.write(first[i:i + 1])
                await writer.drain()
            writer.write(rest)
            answers = {}
            for _ in range(5):
                size = struct.unpack(">I", await asyncio.wait_for(reader.readexactly(4), TIMEOUT_S))[0]
                call_id, result = owner_calls.decode_result(await reader.readexactly(size))
                answers[call_id] = result
            assert answers == {i: ListedOffset(ErrorCode.none, offset=i) for i in range(5)}
        finally:
            writer.close()
            server.close()
    run(scenario())


def test_a_length_beyond_the_limit_closes_that_channel_only(caplog):
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag)
        reader, writer = await asyncio.open_unix_connection(socket_name(tag, 0))
        client = PeerClient(tag)
        try:
            writer.write(struct.pack(">I", peers.MAX_FRAME_BYTES + 1))
            assert await asyncio.wait_for(reader.read(), TIMEOUT_S) == b""  # closed by the server
            assert await client.call(0, ListOffset("t", 0, 9)) == ListedOffset(ErrorCode.none, offset=9)
        finally:
            writer.close()
            client.close()
            server.close()
    with caplog.at_level(logging.ERROR, logger="hpbroker.workers.peers"):
        run(scenario())
    assert any("peer channel closed" in r.getMessage() for r in caplog.records)


def test_a_call_whole_before_a_bad_length_in_the_same_read_is_answered_then_the_channel_closes(caplog):
    """The owner may have acted on the calls ahead of a broken frame: they are
    answered before the channel closes, not failed as if never run."""
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag)
        reader, writer = await asyncio.open_unix_connection(socket_name(tag, 0))
        try:
            body = owner_calls.encode(7, ListOffset("t", 0, 7))
            writer.write(struct.pack(">I", len(body)) + body + struct.pack(">I", peers.MAX_FRAME_BYTES + 1))
            rest = await asyncio.wait_for(reader.read(), TIMEOUT_S)  # everything until the server closes
            size = struct.unpack_from(">I", rest)[0]
            assert len(rest) == 4 + size
            assert owner_calls.decode_result(rest[4:]) == (7, ListedOffset(ErrorCode.none, offset=7))
        finally:
            writer.close()
            server.close()
    with caplog.at_level(logging.ERROR, logger="hpbroker.workers.peers"):
        run(scenario())
    assert any("peer channel closed" in r.getMessage() for r in caplog.records)


def test_a_stopping_worker_closes_the_channels_open_to_it():
    """Once its server closes, a stopping worker reads no more calls (its logs
    close next): a peer's channel ends and its next call is unavailable."""
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag)
        client = PeerClient(tag)
        try:
            assert await client.call(0, ListOffset("t", 0, 1)) == ListedOffset(ErrorCode.none, offset=1)
            server.close()
            with pytest.raises(PeerUnavailable):
                await asyncio.wait_for(client.call(0, ListOffset("t", 0, 2)), TIMEOUT_S)
        finally:
            client.close()
            server.close()
    run(scenario())


def test_a_call_to_a_worker_that_is_not_listening_is_unavailable_and_owners_say_retriable():
    async def scenario():
        tag = unique_tag()
        server, _ = await serving(tag, 0)
        client = PeerClient(tag)
        try:
            with pytest.raises(PeerUnavailable, match="worker 1 is not reachable"):
                await asyncio.wait_for(client.call(1, ListOffset("t", 0, 1)), TIMEOUT_S)
            owners = Owners(2, 3, LocalOwner({}), client, 50)
            assert (await ask(owners, ListOffset("t", 0, 1), 1, ListedOffset)).error == ErrorCode.not_leader_or_follower
            assert (await ask(owners, Heartbeat("g", 1, "m"), 1, Done)).error == ErrorCode.coordinator_not_available
            assert (await ask(owners, ListOffset("t", 0, 1), 0, ListedOffset)).offset == 1  # others unaffected
        finally:
            client.close()
            server.close()
    run(scenario())


def test_calls_for_many_partitions_go_as_one_batch_per_owner():
    async def scenario():
        tag = unique_tag()
        seen = []

        async def batch(call):
            seen.append(len(call.calls))
            return owner_calls.Batched([ListedOffset(ErrorCode.none, offset=c.timestamp) for c in call.calls])
        servers = []
        for index in range(3):
            server = PeerServer(tag, index, LocalOwner({owner_calls.Batch: batch}))
            await server.start()
            servers.append(server)
        client = PeerClient(tag)
        try:
            owners = Owners(0, 3, LocalOwner({owner_calls.Batch: batch}), client, 50)
            calls = [ListOffset(f"t{i}", i, i) for i in range(30)]
            assert [r.offset for r in await owners.ask_all(calls)] == list(range(30))
            assert sorted(seen) == sorted(sum(owners.owner_of(c) == w for c in calls) for w in range(3) if
                                          any(owners.owner_of(c) == w for c in calls))
        finally:
            client.close()
            for server in servers:
                server.close()
    run(scenario())


def test_append_payloads_travel_by_reference_and_their_slots_free_only_on_the_answer():
    async def scenario():
        tag = unique_tag()
        arena = PayloadArena(2, 64 + (1 << 18))  # a payload of up to 64 KiB goes by reference
        seen: list[tuple[type, bytes, bool]] = []
        entered, gate = asyncio.Event(), asyncio.Event()

        async def append(call: Append) -> AppendResult:
            seen.append((type(call.records), bytes(call.records), call.payload is not None))
            entered.set()
            await gate.wait()
            return AppendResult(ErrorCode.none, base_offset=len(call.records))

        async def batch(call: owner_calls.Batch) -> owner_calls.Batched:
            return owner_calls.Batched([await append(c) for c in call.calls if isinstance(c, Append)])

        server = PeerServer(tag, 1, LocalOwner({Append: append, owner_calls.Batch: batch}), arena.receiver())
        await server.start()
        sender = arena.sender(0)
        client = PeerClient(tag, sender)
        try:
            cancelled = asyncio.ensure_future(client.call(1, Append("t", 0, b"r" * 500)))
            await asyncio.wait_for(entered.wait(), TIMEOUT_S)
            # the frame carried only the reference; a small payload the owner copies out at once
            assert seen == [(bytearray, b"r" * 500, False)]
            assert sender.live == 1
            cancelled.cancel()  # the caller gave up; the owner may still be reading
            with pytest.raises(asyncio.CancelledError):
                await cancelled
            assert sender.live == 1, "a slot is freed by its answer, not by its caller leaving"
            gate.set()
            batch_answer = await asyncio.wait_for(
                client.call(1, owner_calls.Batch([Append("t", 1, b"a" * 100), Append("t", 2, b"b" * 20000),
                                                  Append("t", 3, b"c" * 70000)])),
                TIMEOUT_S)
            assert [r.base_offset for r in batch_answer.results] == [100, 20000, 70000]
            # the second the owner reads where it lies, keeping the reference to check it again once
            # written; the third is above a quarter of the region: inline, as bytes
            assert seen[1:] == [(bytearray, b"a" * 100, False), (memoryview, b"b" * 20000, True),
                                (bytes, b"c" * 70000, False)]
            assert sender.live == 0
        finally:
            client.close()
            server.close()
    run(scenario())


def test_a_reference_the_arena_refuses_is_answered_failed_and_the_channel_serves_on():
    async def scenario():
        tag = unique_tag()
        arena = PayloadArena(1, 64 + 4096)
        server = PeerServer(tag, 0, LocalOwner(Target().handlers()), arena.receiver())
        await server.start()
        stale = arena.sender(0).put(b"gone")
        assert stale is not None
        arena.sender(0)  # its sender restarted
        client = PeerClient(tag)  # sends the reference as given
        try:
            refused = await asyncio.wait_for(client.call(0, Append("t", 0, b"", payload=stale)), TIMEOUT_S)
            assert isinstance(refused, Failed) and refused.error == ErrorCode.unknown_server_error
            assert "rewritten" in refused.message
            fine = await asyncio.wait_for(client.call(0, Append("t", 0, b"abcd")), TIMEOUT_S)
            assert fine == AppendResult(ErrorCode.none, base_offset=4)
        finally:
            client.close()
            server.close()
    run(scenario())


# A worker that dies or restarts is another process whose sockets all close;
# the tests below run the server in a child process and kill it, as happens.
CHILD = """
import asyncio, os, sys
from hpbroker.errors import ErrorCode
from hpbroker.workers.owner_calls import Heartbeat, PartitionBounds, PartitionBoundsResult
from hpbroker.workers.owners import LocalOwner
from hpbroker.workers.peers import PeerServer

async def hang(call):
    print("hanging", flush=True)
    await asyncio.Event().wait()

def pid(call):
    return PartitionBoundsResult(ErrorCode.none, os.getpid())

async def main():
    server = PeerServer(sys.argv[1], int(sys.argv[2]), LocalOwner({Heartbeat: hang, PartitionBounds: pid}))
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


async def child_pid(client: PeerClient, worker: int) -> int:
    return (await asyncio.wait_for(client.call(worker, PartitionBounds("t", 0)), TIMEOUT_S)).log_start_offset


def test_a_worker_that_dies_mid_call_fails_the_call_as_unavailable():
    async def scenario():
        tag = unique_tag()
        child = await ChildWorker.start(tag, 2)
        client = PeerClient(tag)
        try:
            pending = asyncio.ensure_future(client.call(2, Heartbeat("g", 1, "m")))
            await child.said("hanging")  # the call is in the worker's hands
            await child.kill()
            with pytest.raises(PeerUnavailable):
                await asyncio.wait_for(pending, TIMEOUT_S)
            with pytest.raises(PeerUnavailable, match="worker 2 is not reachable"):
                await child_pid(client, 2)
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
            assert await child_pid(client, 0) == first.process.pid
            await first.kill()
            second = await ChildWorker.start(tag, 0)
            # the old channel saw its end of file while the new process started
            assert await child_pid(client, 0) == second.process.pid
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
                await asyncio.wait_for(client.call(1, ListOffset("t", 0, 1)), TIMEOUT_S)
        finally:
            client.close()
    run(scenario())


def test_a_closed_client_fails_its_pending_calls():
    async def scenario():
        tag = unique_tag()
        server, target = await serving(tag)
        client = PeerClient(tag)
        try:
            pending = asyncio.ensure_future(client.call(0, Heartbeat("g", 1, "never")))
            await entered(target, "never")
            client.close()
            with pytest.raises(PeerUnavailable):
                await asyncio.wait_for(pending, TIMEOUT_S)
        finally:
            target.gates["never"].set()
            server.close()
    run(scenario())
