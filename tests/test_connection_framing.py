"""KafkaConnection (``hpbroker/workers/connection.py``) reading frames off a
real TCP socket: requests split over many reads, pipelined requests answered
in order (owed answers too, while later requests are handled), a request
handled in the read callback that read it when nothing else is in hand (in
the connection's context; one that waits goes on in a task, the next behind
it, and a stopping worker waits for it), and the frames it refuses (too
large, negative, empty, a truncated header) closing the connection with one
log line; end of file mid-frame; an answer from a file larger than the
socket takes at once; reading paused while too many bytes of requests wait;
a connection due to move to another worker reading no further than the
request in hand, and reading on when the move is refused.

The connection runs with a two-field fake context and a one-entry handler
table: ApiVersions v0 (an empty body, so any frame's bytes are the header's),
answered with the correlation id, so the client sees which request an answer
belongs to.  The splitter itself is tested in test_protocol_framing.py.
Nothing sleeps: tests wait on events and reads, each under a timeout."""

import asyncio
import errno
import logging
import os
import struct
import tempfile

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.protocol.framing import frame
from hpbroker.protocol.schemas import API_VERSIONS
from hpbroker.workers import affinity, connection
from hpbroker.workers.client_identity import CLIENT_HOST
from hpbroker.workers.connection import KafkaConnection
from hpbroker.workers.context import Later
from hpbroker.workers.fetch_response import FileRegion

TIMEOUT_S = 5
LIMIT = 1000  # socket.request.max.bytes of these connections
MOVE_AFTER = 2  # connection.move.after.requests of those that may move


class Context:
    """What a connection needs of the worker's context: its configuration and
    byte counters; ``received(n)`` waits until ``n`` bytes have come in."""

    def __init__(self):
        self.config = {"socket.request.max.bytes": LIMIT, "connection.move.after.requests": MOVE_AFTER}
        self.index = 0  # the worker this is
        self.bytes_out = 0
        self._bytes_in = 0
        self._arrived = asyncio.Event()

    @property
    def bytes_in(self) -> int:
        return self._bytes_in

    @bytes_in.setter
    def bytes_in(self, value: int) -> None:
        self._bytes_in = value
        self._arrived.set()

    async def received(self, total: int) -> None:
        while self._bytes_in < total:
            self._arrived.clear()
            await asyncio.wait_for(self._arrived.wait(), TIMEOUT_S)


class Broken(BaseException):
    """Not an ``Exception``: what a bug past a handler's own error answer looks like to the connection."""


class Handler:
    """ApiVersions answered with ``correlation id + b"ok"``; a test may hold a
    correlation id's answer back with a gate.  A correlation id in ``owed`` is
    handled at once and its answer owed (``Later``, as an acks=all produce's),
    made when its gate opens; one in ``failing`` fails there."""

    def __init__(self):
        self.handled: list[int] = []
        self.gates: dict[int, asyncio.Event] = {}
        self.owed: set[int] = set()
        self.failing: set[int] = set()
        self.broken: set[int] = set()  # correlation ids whose handler raises past the connection's own handling
        self.files: dict[int, int] = {}  # correlation id -> a descriptor its owed answer is sent from
        self.file_bytes: dict[int, int] = {}  # how many of the file's bytes that answer sends (default 2)
        self.regions: list[int] = []  # the descriptors those answers were given
        self.busy = 0  # requests inside the handler at once: the connection serves one at a time
        self.most_busy = 0
        self.moved = asyncio.Event()  # set whenever ``handled`` grows
        self.tasks: list = []  # per request, the task it began in (None: the read callback's turn)
        self.hosts: list[str] = []  # per request, the client host its context names, as it begins and ends
        self.owner: int | None = None  # when set, every request asks that worker (as an owner call notes)

    async def have_handled(self, expected: list[int]) -> None:
        while self.handled != expected:
            self.moved.clear()
            await asyncio.wait_for(self.moved.wait(), TIMEOUT_S)

    async def __call__(self, ctx, header, request):
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            cid = header.correlation_id
            if self.owner is not None:
                affinity.saw((self.owner,))
            self.tasks.append(asyncio.current_task())
            self.hosts.append(CLIENT_HOST.get())
            if cid in self.owed:
                self.handled.append(cid)
                self.moved.set()
                return Later(self._rest(cid))
            gate = self.gates.get(cid)
            if gate is not None:
                await gate.wait()
            if cid in self.broken:
                raise Broken(f"request {cid}")
            self.handled.append(cid)
            self.hosts.append(CLIENT_HOST.get())
            self.moved.set()
            return [frame(struct.pack(">i", cid) + b"ok")]
        finally:
            self.busy -= 1

    async def _rest(self, cid: int) -> list:
        await self.gates.setdefault(cid, asyncio.Event()).wait()
        if cid in self.failing:
            raise RuntimeError("the wait failed")
        if cid in self.files:  # an answer sent from a file, as Fetch's records are
            region = FileRegion(os.dup(self.files[cid]), 0, self.file_bytes.get(cid, 2))
            self.regions.append(region.fd)
            return [struct.pack(">ii", 4 + region.size, cid), region]
        return [frame(struct.pack(">i", cid) + b"ok")]


def request(correlation_id: int, client_id: bytes = b"test") -> bytes:
    """An ApiVersions v0 request frame (request header v1, no body)."""
    return frame(struct.pack(">hhih", API_VERSIONS, 0, correlation_id, len(client_id)) + client_id)


def answer(correlation_id: int) -> bytes:
    return frame(struct.pack(">i", correlation_id) + b"ok")


class Served:
    """One KafkaConnection behind a loopback listener, and a client of it;
    with ``move``, the connection may be handed to another worker (``move(connection,
    worker)`` says whether it was) after ``MOVE_AFTER`` requests to that worker."""

    def __init__(self, move=None):
        self.ctx = Context()
        self.handler = Handler()
        self.closed = asyncio.Event()
        self.connection: KafkaConnection | None = None
        self.move = move

    def _connection(self) -> KafkaConnection:
        self.connection = KafkaConnection(self.ctx, {API_VERSIONS: self.handler}, lambda c: self.closed.set(),
                                          self.move)
        return self.connection

    async def __aenter__(self):
        self.server = await asyncio.get_running_loop().create_server(self._connection, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", port)
        return self

    async def __aexit__(self, *exc):
        self.writer.close()
        self.server.close()
        await asyncio.wait_for(self.closed.wait(), TIMEOUT_S)
        assert self.connection is not None
        if self.connection.task is not None:
            await asyncio.wait_for(self.connection.task, TIMEOUT_S)

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def read(self, size: int) -> bytes:
        return await asyncio.wait_for(self.reader.readexactly(size), TIMEOUT_S)

    async def read_to_the_end(self) -> bytes:
        """What arrives before the server closes (a reset counts as the end)."""
        try:
            return await asyncio.wait_for(self.reader.read(), TIMEOUT_S)
        except ConnectionResetError:
            return b""


def assert_one_line(caplog, why: str) -> None:
    """The connection was closed with one warning naming the client and the reason."""
    [line] = [r.getMessage() for r in caplog.records if r.name == "hpbroker.workers.connection"]
    assert line.startswith("closing connection from 127.0.0.1:") and line.endswith(f": {why}"), line


def run(scenario):
    async def main():
        async with Served() as served:
            await scenario(served)
    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_request_split_into_single_bytes_is_reassembled():
    async def scenario(s):
        data = request(7, b"x" * 40)
        for i in range(len(data) - 1):
            await s.send(data[i:i + 1])
            await s.ctx.received(i + 1)  # the connection has read this byte on its own
        assert s.handler.handled == []
        await s.send(data[-1:])
        assert await s.read(len(answer(7))) == answer(7)
        assert s.handler.handled == [7] and s.ctx.bytes_in == len(data)
        assert s.ctx.bytes_out == len(answer(7))
    run(scenario)


def test_requests_cut_anywhere_across_writes_are_each_answered_once():
    async def scenario(s):
        stream = b"".join(request(i, b"c" * i) for i in range(1, 6))
        cuts = [0, 3, 4, 17, 18, 19, 40, 41, len(stream)]  # inside sizes, headers and across frames
        for start, end in zip(cuts, cuts[1:]):
            await s.send(stream[start:end])
            await s.ctx.received(end)
        assert await s.read(5 * len(answer(0))) == b"".join(answer(i) for i in range(1, 6))
        assert s.handler.handled == [1, 2, 3, 4, 5]
    run(scenario)


def test_pipelined_requests_in_one_write_are_answered_in_order_one_at_a_time():
    async def scenario(s):
        s.handler.gates[1] = gate = asyncio.Event()
        await s.send(request(1) + request(2) + request(3))
        await s.ctx.received(3 * len(request(0)))
        assert s.handler.handled == []  # 1 holds the line; 2 and 3 wait behind it
        gate.set()
        assert await s.read(3 * len(answer(0))) == answer(1) + answer(2) + answer(3)
        assert s.handler.handled == [1, 2, 3] and s.handler.most_busy == 1
    run(scenario)


def test_reading_pauses_once_the_queued_requests_reach_their_byte_bound_and_resumes_as_they_are_handled(
        monkeypatch):
    """A client pipelining large requests faster than they are handled is held
    back by TCP once a few are queued, not buffered 64 deep."""
    monkeypatch.setattr(connection, "_MAX_QUEUED_BYTES", 100_000)
    big = [request(cid, b"x" * 30_000) for cid in range(2, 12)]

    async def scenario(s):
        s.handler.gates[1] = gate = asyncio.Event()
        await s.send(request(1))
        await s.ctx.received(len(request(1)))
        s.writer.write(b"".join(big))  # not drained: the server stops taking them
        await s.ctx.received(len(request(1)) + 4 * len(big[0]))
        assert s.connection.paused and s.connection.queue.qsize() <= 4  # the serving task may hold one
        assert s.ctx.bytes_in < len(request(1)) + 5 * len(big[0])  # nothing of the fifth frame read yet
        gate.set()
        assert await s.read(11 * len(answer(0))) == b"".join(answer(cid) for cid in range(1, 12))
        assert not s.connection.paused and s.connection.queued_bytes == 0

    async def main():
        served = Served()
        served.ctx.config["socket.request.max.bytes"] = 40_000
        async with served:
            await scenario(served)
    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_request_that_waits_for_nothing_is_answered_in_the_turn_that_read_it():
    async def scenario(s):
        await s.send(request(1))
        assert await s.read(len(answer(1))) == answer(1)  # the serving task is up and idle now
        await s.send(request(2))
        assert await s.read(len(answer(2))) == answer(2)
        assert s.handler.tasks[1] is None  # no task: handled by the read callback itself
        assert s.handler.hosts[2:] == ["/127.0.0.1", "/127.0.0.1"]  # in the connection's context all the same
    run(scenario)


async def begin_a_waiting_request(s) -> asyncio.Event:
    """Request 1 answered (the serving task is idle after it), then request 2
    begun in the read callback and waiting, in a task, for the gate returned."""
    await s.send(request(1))
    assert await s.read(len(answer(1))) == answer(1)
    s.handler.gates[2] = gate = asyncio.Event()
    await s.send(request(2))
    await s.ctx.received(2 * len(request(0)))
    assert s.connection.started is not None
    return gate


def run_moving(scenario, moved: bool):
    """``scenario(served, moves, handed)`` on a connection whose requests all go to worker 1;
    ``moves`` collects the workers it was handed to (each hand-over answered ``moved``),
    ``handed`` is set at the first."""
    moves: list[int] = []
    handed = asyncio.Event()

    def move(conn, worker: int) -> bool:
        moves.append(worker)
        handed.set()
        if moved:
            conn.transport.abort()  # as the worker's hand-over: its descriptor goes, the client's stream with it here
        return moved

    async def main():
        async with Served(move) as served:
            served.handler.owner = 1
            await scenario(served, moves, handed)
    asyncio.run(asyncio.wait_for(main(), 20))


def test_a_connection_due_to_move_reads_no_further_than_the_request_in_hand_and_moves_once_idle():
    """A connection that always has a request in hand (one waiting on another
    worker while the next arrives) is never idle between requests; once a
    move is due, it reads the rest of the request it has begun, then nothing:
    the requests it has are answered, in order, and it is handed over with
    the next request unread, in the socket for the worker it goes to."""
    async def scenario(s, moves, handed):
        await s.send(request(1))
        assert await s.read(len(answer(1))) == answer(1)
        s.handler.gates[2] = gate = asyncio.Event()
        third, fourth = request(3), request(4)
        await s.send(request(2) + third[:5])  # 2 begins and waits; the second to worker 1: a move is due
        await s.ctx.received(2 * len(request(0)) + 5)
        assert s.connection.started is not None and not s.connection.holding
        await s.send(third[5:] + fourth)
        await s.ctx.received(3 * len(request(0)))
        assert s.connection.holding and moves == []
        gate.set()
        assert await s.read(2 * len(answer(0))) == answer(2) + answer(3)
        await asyncio.wait_for(handed.wait(), TIMEOUT_S)
        assert moves == [1] and s.handler.handled == [1, 2, 3]
        assert s.ctx.bytes_in == 3 * len(request(0)), "request 4 stays in the socket"
    run_moving(scenario, moved=True)


def test_a_connection_whose_move_is_refused_reads_on():
    async def scenario(s, moves, handed):
        gate = await begin_a_waiting_request(s)  # 2 waits, and the move due: reading stops
        await s.send(request(3) + request(4))
        assert s.ctx.bytes_in == 2 * len(request(0))
        gate.set()
        await asyncio.wait_for(handed.wait(), TIMEOUT_S)  # refused: it reads on
        assert await s.read(3 * len(answer(0))) == answer(2) + answer(3) + answer(4)
        assert set(moves) == {1} and s.handler.handled == [1, 2, 3, 4]
        assert not s.connection.reader.bounded or s.connection.route.elsewhere(0) is not None
    run_moving(scenario, moved=False)


def test_a_request_begun_as_it_arrived_that_waits_keeps_its_context_and_the_next_waits_behind_it():
    async def scenario(s):
        gate = await begin_a_waiting_request(s)
        await s.send(request(3))
        await s.ctx.received(3 * len(request(0)))
        assert s.handler.handled == [1]  # 3 waits behind 2
        gate.set()
        assert await s.read(2 * len(answer(0))) == answer(2) + answer(3)
        assert s.handler.handled == [1, 2, 3] and s.handler.most_busy == 1
        assert s.handler.tasks[1] is None and s.handler.hosts[2:4] == ["/127.0.0.1", "/127.0.0.1"]
    run(scenario)


def test_after_a_request_that_waited_the_next_is_again_handled_in_the_turn_that_read_it():
    """A request waiting on another worker must not send every later request
    of its connection through the serving task (a wake-up and a turn of the
    loop each): once it is done and nothing is queued, the read callback
    begins the next one itself, as before it."""
    async def scenario(s):
        gate = await begin_a_waiting_request(s)
        gate.set()
        assert await s.read(len(answer(2))) == answer(2)
        await s.send(request(3))
        assert await s.read(len(answer(3))) == answer(3)
        assert s.handler.handled == [1, 2, 3]
        assert s.handler.tasks[1] is None and s.handler.tasks[2] is None  # 2 began in a read callback, 3 too
        assert s.connection.started is None
    run(scenario)


def test_a_request_that_waited_and_then_broke_closes_its_connection_with_the_reason(caplog):
    async def scenario(s):
        gate = await begin_a_waiting_request(s)
        s.handler.broken.add(2)
        gate.set()
        assert await s.read_to_the_end() == b""  # no answer: the connection is closed
        await asyncio.wait_for(s.closed.wait(), TIMEOUT_S)
        await asyncio.wait_for(s.connection.task, TIMEOUT_S)  # the serving task ends, without raising
        assert s.connection.dropped and s.handler.handled == [1]
    with caplog.at_level(logging.ERROR, logger="hpbroker.workers.connection"):
        run(scenario)
    [record] = [r for r in caplog.records if r.name == "hpbroker.workers.connection"]
    assert "handling a request failed" in record.getMessage() and record.exc_info is not None


@pytest.mark.parametrize("size, logged", [
    (LIMIT + 1, f"request of {LIMIT + 1} bytes exceeds socket.request.max.bytes={LIMIT}"),
    (0x7FFFFFFF, f"request of {0x7FFFFFFF} bytes exceeds socket.request.max.bytes={LIMIT}"),
    (-1, f"request of -1 bytes exceeds socket.request.max.bytes={LIMIT}"),
])
def test_a_size_out_of_range_closes_the_connection_from_its_prefix(size, logged, caplog):
    async def scenario(s):
        await s.send(request(1))
        assert await s.read(len(answer(1))) == answer(1)
        await s.send(struct.pack(">i", size) + request(2))
        assert await s.read_to_the_end() == b""
        await asyncio.wait_for(s.closed.wait(), TIMEOUT_S)
        assert s.connection.dropped and s.handler.handled == [1]
    with caplog.at_level(logging.WARNING, logger="hpbroker.workers.connection"):
        run(scenario)
    assert_one_line(caplog, logged)


def test_a_frame_at_the_size_limit_is_read():
    async def scenario(s):
        client_id = b"c" * (LIMIT - 10)  # prefix 8 + length 2 + id: exactly LIMIT bytes
        data = request(9, client_id)
        assert len(data) == 4 + LIMIT
        await s.send(data)
        assert await s.read(len(answer(9))) == answer(9)
    run(scenario)


def test_a_request_whole_before_a_bad_size_in_the_same_read_is_answered_then_the_connection_closes(caplog):
    async def scenario(s):
        await s.send(request(1) + struct.pack(">i", LIMIT + 1) + b"junk")
        assert await s.read_to_the_end() == answer(1)
        await asyncio.wait_for(s.closed.wait(), TIMEOUT_S)
        assert s.handler.handled == [1] and s.connection.dropped
    with caplog.at_level(logging.WARNING, logger="hpbroker.workers.connection"):
        run(scenario)
    assert_one_line(caplog, f"request of {LIMIT + 1} bytes exceeds socket.request.max.bytes={LIMIT}")


@pytest.mark.parametrize("body, logged", [
    (b"", "malformed request: request of 0 bytes is shorter than a header"),
    (struct.pack(">hhi", API_VERSIONS, 0, 5)[:7], "malformed request: request of 7 bytes is shorter than a header"),
    # 31 bytes whose client id claims 100
    (struct.pack(">hhih", API_VERSIONS, 0, 5, 100) + b"x" * 21,
     "malformed request: request header truncated in client_id"),
])
def test_an_empty_or_short_frame_closes_the_connection(body, logged, caplog):
    async def scenario(s):
        await s.send(request(1) + frame(body) + request(2))
        # the request before the bad one is answered; the one after it never is
        assert await s.read_to_the_end() == answer(1)
        await asyncio.wait_for(s.closed.wait(), TIMEOUT_S)
        assert s.handler.handled == [1] and s.connection.dropped
    with caplog.at_level(logging.WARNING, logger="hpbroker.workers.connection"):
        run(scenario)
    assert_one_line(caplog, logged)


def test_end_of_file_mid_frame_answers_what_was_whole_and_closes():
    async def scenario(s):
        s.handler.gates[1] = gate = asyncio.Event()
        second = request(2)
        await s.send(request(1) + second[:len(second) // 2])
        s.writer.write_eof()  # the client goes away mid-frame
        await asyncio.wait_for(s.closed.wait(), TIMEOUT_S)
        gate.set()  # a request already received is still handled (an acks=0 produce appends)
        await asyncio.wait_for(s.connection.task, TIMEOUT_S)
        assert s.handler.handled == [1] and not s.connection.dropped
        assert s.connection.reader.buffered == len(second) // 2  # the half frame is never a request
    run(scenario)


def test_owed_answers_let_later_requests_be_handled_and_still_go_out_in_request_order():
    async def scenario(s):
        s.handler.owed = {1, 3}
        await s.send(request(1) + request(2) + request(3) + request(4))
        await s.ctx.received(4 * len(request(0)))
        await s.handler.have_handled([1, 2, 3, 4])  # all handled, none answered yet
        assert s.ctx.bytes_out == 0
        s.handler.gates[3].set()
        [third] = [a for a in s.connection.owed if isinstance(a, asyncio.Task)]  # 1's is with the sender
        await asyncio.wait_for(asyncio.shield(third), TIMEOUT_S)
        assert s.ctx.bytes_out == 0, "3 is made, but 1 is owed before it"
        s.handler.gates[1].set()
        assert await s.read(4 * len(answer(0))) == answer(1) + answer(2) + answer(3) + answer(4)
        assert s.handler.most_busy == 1  # handled one at a time all the same
        await s.send(request(5))  # nothing owed: answered directly again
        assert await s.read(len(answer(5))) == answer(5)
        assert not s.connection.owed and s.connection.sender is None
    run(scenario)


def test_an_owed_answer_that_fails_is_answered_with_an_error_and_the_rest_follow(caplog):
    async def scenario(s):
        s.handler.owed = s.handler.failing = {1}
        s.handler.gates[1] = asyncio.Event()
        await s.send(request(1) + request(2))
        await s.handler.have_handled([1, 2])
        s.handler.gates[1].set()
        size = struct.unpack(">i", await s.read(4))[0]
        error_answer = await s.read(size)
        # ApiVersions v0: the correlation id, then UNKNOWN_SERVER_ERROR
        assert struct.unpack(">ih", error_answer[:6]) == (1, ErrorCode.unknown_server_error)
        assert await s.read(len(answer(2))) == answer(2)
    with caplog.at_level(logging.ERROR, logger="hpbroker.workers.connection"):
        run(scenario)
    assert any("request from 127.0.0.1:" in r.getMessage() and r.exc_info for r in caplog.records)


def test_a_draining_connection_sends_what_it_owes_before_it_is_done():
    async def scenario(s):
        s.handler.owed = {1, 2}
        await s.send(request(1) + request(2))
        await s.handler.have_handled([1, 2])
        s.connection.drain()  # the worker is stopping
        await asyncio.sleep(0)
        assert not s.connection.task.done(), "the serving task waits for what it owes"
        s.handler.gates[2].set()
        s.handler.gates[1].set()
        assert await s.read(2 * len(answer(0))) == answer(1) + answer(2)
        await asyncio.wait_for(s.connection.task, TIMEOUT_S)
        s.connection.close()  # as the worker does once its connections' tasks are done
    run(scenario)


def test_a_stopping_worker_waits_for_the_request_a_connection_began_as_it_arrived():
    async def scenario(s):
        gate = await begin_a_waiting_request(s)
        s.connection.drain()  # the worker is stopping: it waits on the serving task
        await asyncio.sleep(0)
        assert not s.connection.task.done(), "the serving task waits for the request in hand"
        gate.set()
        assert await s.read(len(answer(2))) == answer(2)
        await asyncio.wait_for(s.connection.task, TIMEOUT_S)
        assert s.handler.handled == [1, 2]
        s.connection.close()
    run(scenario)


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as exc:
        return exc.errno == errno.EBADF
    return False


def test_owed_answers_of_a_client_gone_close_their_files():
    with tempfile.TemporaryFile() as f:
        f.write(b"ok")
        f.flush()

        async def scenario(s):
            s.handler.owed = {1, 2, 3}
            s.handler.files = {1: f.fileno(), 2: f.fileno(), 3: f.fileno()}
            await s.send(request(1) + request(2) + request(3))
            await s.handler.have_handled([1, 2, 3])
            s.writer.transport.abort()  # the client goes away with three answers owed
            await asyncio.wait_for(s.closed.wait(), TIMEOUT_S)
            for cid in (2, 1, 3):
                s.handler.gates[cid].set()
            await asyncio.wait_for(s.connection.task, TIMEOUT_S)
            assert len(s.handler.regions) == 3 and all(_closed(fd) for fd in s.handler.regions)
            assert not s.connection.owed and s.connection.sender is None
        run(scenario)


def test_an_answer_from_a_file_larger_than_the_socket_takes_at_once_arrives_whole_and_in_order():
    """The file's bytes go straight to the socket while it takes them, the rest
    once it has room; the answer after it waits for all of them."""
    size = 16 << 20  # far beyond what loopback's socket buffers hold
    payload = os.urandom(size)
    with tempfile.TemporaryFile() as f:
        f.write(payload)
        f.flush()

        async def scenario(s):
            s.handler.owed = {1}
            s.handler.files, s.handler.file_bytes = {1: f.fileno()}, {1: size}
            s.handler.gates[1] = asyncio.Event()
            s.handler.gates[1].set()
            await s.send(request(1) + request(2))
            assert struct.unpack(">ii", await s.read(8)) == (4 + size, 1)
            assert await s.read(size) == payload
            assert await s.read(len(answer(2))) == answer(2)
            assert s.ctx.bytes_out == 8 + size + len(answer(2))
        run(scenario)


def test_an_answer_whose_file_ends_early_closes_the_connection_instead_of_breaking_the_stream(caplog):
    """A region promises more bytes than its file holds now (cut after it was
    located): the size prefix is out, so the connection closes rather than let
    the next answer's bytes stand in for the missing ones."""
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 100)
        f.flush()

        async def scenario(s):
            s.handler.owed = {1}
            s.handler.files, s.handler.file_bytes = {1: f.fileno()}, {1: 1100}
            s.handler.gates[1] = asyncio.Event()
            s.handler.gates[1].set()
            await s.send(request(1) + request(2))
            got = await s.read_to_the_end()
            assert got[:8] == struct.pack(">ii", 4 + 1100, 1) and len(got) <= 8 + 100
            assert answer(2) not in got
        run(scenario)
    assert_one_line(caplog, "write failed: a segment file ended 1000 bytes into an answer")
