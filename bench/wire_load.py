"""A raw-socket request loop: the same pre-encoded request, one outstanding per
connection, on several connections at once (one thread, selectors).

The client is plain Python, so it is slow next to a C client; the benchmark
reads the broker's CPU only, and counts the answers inside its window.
"""

import selectors
import socket
import struct
import time
from collections.abc import Callable

LIST_OFFSETS, LIST_OFFSETS_VERSION = 2, 1
LATEST = -1


def list_offsets_request(topic: str, partition: int, correlation_id: int = 1) -> bytes:
    """ListOffsets v1 for the latest offset of one partition, framed (header v1: client id)."""
    name, client = topic.encode(), b"request-cost"
    header = struct.pack(">hhih", LIST_OFFSETS, LIST_OFFSETS_VERSION, correlation_id, len(client)) + client
    body = (struct.pack(">ii", -1, 1) + struct.pack(">h", len(name)) + name  # replica -1, one topic
            + struct.pack(">iiq", 1, partition, LATEST))  # one partition, timestamp -1: the log end
    return struct.pack(">i", len(header) + len(body)) + header + body


def list_offsets_answer(frame: bytes) -> tuple[int, int]:
    """(error code, offset) of a ListOffsets v1 answer to list_offsets_request (its frame, without the size)."""
    pos = 4 + 4  # correlation id, topic count
    (name_len,) = struct.unpack_from(">h", frame, pos)
    pos += 2 + name_len + 4 + 4  # name, partition count, partition index
    error, _timestamp, offset = struct.unpack_from(">hqq", frame, pos)
    return error, offset


def closed_loop(host: str, port: int, request: bytes, connections: int, seconds: float, warmup: float,
                edge: Callable[[], None]) -> tuple[int, bytes]:
    """Send ``request`` on each connection whenever its previous answer is in; after ``warmup``
    seconds call ``edge()`` (a meter's start), run ``seconds`` more, call ``edge()`` again.
    Returns (answers received between the two edges, the first answer frame)."""
    sel = selectors.DefaultSelector()
    buffers: dict[socket.socket, bytearray] = {}
    for _ in range(connections):
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(request)
        sel.register(s, selectors.EVENT_READ)
        buffers[s] = bytearray()
    first = b""
    answered = 0
    start = time.monotonic()
    window_start = window_end = None
    try:
        while True:
            now = time.monotonic()
            if window_start is None and now - start >= warmup:
                edge()
                window_start, answered = now, 0
            elif window_start is not None and now - window_start >= seconds:
                edge()
                window_end = now
                break
            for key, _ in sel.select(0.1):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("broker closed a connection")
                buf = buffers[s]
                buf += chunk
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf)
                    if len(buf) < 4 + size:
                        break
                    if not first:
                        first = bytes(buf[4:4 + size])
                    del buf[:4 + size]
                    answered += 1
                    s.sendall(request)
    finally:
        for s in buffers:
            sel.unregister(s)
            s.close()
        sel.close()
    assert window_end is not None
    return answered, first

