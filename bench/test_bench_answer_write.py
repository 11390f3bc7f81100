"""What sending a Fetch answer's records costs a worker: a header and a file
region written by ``KafkaConnection`` to a loopback TCP socket that another
process drains, against the same bytes sent with a bare ``os.sendfile`` (the
floor) and with asyncio's ``loop.sendfile`` (what the connection used for
every region before it sent straight to the socket).

    .venv/bin/python -m pytest bench/test_bench_answer_write.py --benchmark-only

``extra_info``: CPU µs of this process per answer (its request handed to the
connection, a one-line handler, the answer written), medians of interleaved
rounds, and the ratio to the floor; record sizes from 200 B to 1 MiB.
"""

import asyncio
import os
import selectors
import socket
import struct
import tempfile
import time

import pytest

from hpbroker.protocol.framing import frame
from hpbroker.protocol.schemas import API_VERSIONS
from hpbroker.workers.connection import KafkaConnection
from hpbroker.workers.fetch_response import FileRegion

ROUNDS, ANSWERS = 5, 400
SIZES = (200, 4096, 65536, 1 << 20)
REQUEST = frame(struct.pack(">hhih", API_VERSIONS, 0, 1, 5) + b"bench")  # ApiVersions v0: header only


def _drain(sockets: list[socket.socket]) -> None:
    """The other process: read every socket to its end."""
    selector = selectors.DefaultSelector()
    for s in sockets:
        selector.register(s, selectors.EVENT_READ)
    left = len(sockets)
    while left:
        for key, _ in selector.select():
            if not key.fileobj.recv(1 << 20):  # type: ignore[union-attr]
                selector.unregister(key.fileobj)
                left -= 1


def _pairs(n: int) -> tuple[list[socket.socket], int]:
    """n connected loopback TCP pairs; our ends, and the pid of the process draining the others."""
    listener = socket.create_server(("127.0.0.1", 0))
    ours, theirs = [], []
    for _ in range(n):
        theirs.append(socket.create_connection(listener.getsockname()))
        ours.append(listener.accept()[0])
    listener.close()
    pid = os.fork()
    if pid == 0:
        for s in ours:
            s.close()
        _drain(theirs)
        os._exit(0)
    for s in theirs:
        s.close()
    return ours, pid


class _Context:
    """What a connection needs of a worker's context; ``sent`` is set as its answers go out."""

    def __init__(self):
        self.config = {"socket.request.max.bytes": 1 << 20}
        self.bytes_in = 0
        self._bytes_out = 0
        self.sent = asyncio.Event()

    @property
    def bytes_out(self) -> int:
        return self._bytes_out

    @bytes_out.setter
    def bytes_out(self, value: int) -> None:
        self._bytes_out = value
        self.sent.set()


@pytest.fixture(scope="module")
def records_file():
    with tempfile.TemporaryFile() as f:
        f.write(os.urandom(max(SIZES)))
        f.flush()
        yield f


def _cpu_us(loop: asyncio.AbstractEventLoop, answer) -> float:
    async def answers() -> float:
        started = time.process_time()
        for _ in range(ANSWERS):
            await answer()
        return (time.process_time() - started) / ANSWERS * 1e6
    return loop.run_until_complete(answers())


@pytest.mark.parametrize("size", SIZES)
def test_an_answer_from_a_file_against_bare_sendfile(benchmark, records_file, size):
    (floor_sock, loop_sock, ours_sock), drainer = _pairs(3)
    loop = asyncio.new_event_loop()
    fd = records_file.fileno()
    header = struct.pack(">ii", 4 + size, 1)
    ctx = _Context()

    async def handler(_ctx, _header, _request):
        return [header, FileRegion(os.dup(fd), 0, size)]

    async def connect():
        made = await loop.connect_accepted_socket(
            lambda: KafkaConnection(ctx, {API_VERSIONS: handler}, lambda _c: None), ours_sock)
        plain, _ = await loop.connect_accepted_socket(asyncio.Protocol, loop_sock)
        return made[1], plain

    connection, plain = loop.run_until_complete(connect())
    floor_sock.setblocking(True)

    async def bare() -> None:
        floor_sock.sendall(header)
        sent = 0
        while sent < size:
            sent += os.sendfile(floor_sock.fileno(), fd, sent, size - sent)

    async def asyncio_sendfile() -> None:
        plain.write(header)
        await loop.sendfile(plain, records_file, 0, size, fallback=False)

    async def ours() -> None:
        out = ctx.bytes_out + len(header) + size  # header and records both out
        connection.get_buffer(-1)[:len(REQUEST)] = REQUEST  # as the transport receives it
        connection.buffer_updated(len(REQUEST))
        while ctx.bytes_out < out:
            ctx.sent.clear()
            await ctx.sent.wait()

    try:
        floors, loops, answers = [], [], []
        for _ in range(ROUNDS):
            floors.append(_cpu_us(loop, bare))
            loops.append(_cpu_us(loop, asyncio_sendfile))
            answers.append(_cpu_us(loop, ours))
        benchmark.pedantic(lambda: _cpu_us(loop, ours), rounds=3)
        floor, via_loop, answer = (sorted(xs)[len(xs) // 2] for xs in (floors, loops, answers))
        benchmark.extra_info.update(size=size, bare_sendfile_us=round(floor, 1), loop_sendfile_us=round(via_loop, 1),
                                    answer_us=round(answer, 1), answer_to_floor=round(answer / floor, 2))
        assert ctx.bytes_out == (3 + ROUNDS) * ANSWERS * (len(header) + size)
    finally:
        connection.close()
        plain.close()
        floor_sock.close()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()
        os.waitpid(drainer, 0)
