"""The kernel's floor under a broker's CPU per byte: receive over loopback TCP
and write() into a file in the page cache, nothing else.

A receiver process accepts one connection, recv_into()s a 1 MiB buffer and
writes what came into a file in the given directory (the brokers' data file
system) until the sender closes; its own CPU (getrusage) is the floor. A
sender process pushes ``nbytes`` in 1 MiB sendall()s; its CPU is not counted.
"""

import multiprocessing
import os
import resource
import socket
import time
from multiprocessing.connection import Connection
from pathlib import Path

CHUNK = 2**20


def _receive(listener: socket.socket, path: str, out: Connection) -> None:
    conn, _ = listener.accept()
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    r0, t0, total = resource.getrusage(resource.RUSAGE_SELF), time.monotonic(), 0
    try:
        while n := conn.recv_into(buf):
            written = 0
            while written < n:
                written += os.write(fd, view[written:n])
            total += n
    finally:
        os.close(fd)
        conn.close()
    r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - t0
    out.send({"bytes": total, "wall": wall,
              "cpu": (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime),
              "user": r1.ru_utime - r0.ru_utime, "sys": r1.ru_stime - r0.ru_stime})


def _send(port: int, nbytes: int) -> None:
    data = os.urandom(CHUNK)
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(nbytes // CHUNK):
            s.sendall(data)


def recv_write(directory: Path, nbytes: int) -> dict[str, float]:
    """{"bytes", "wall", "cpu", "user", "sys"} of the receiver for ``nbytes`` (a multiple of 1 MiB)."""
    ctx = multiprocessing.get_context("spawn")
    path = directory / "floor-recv-write.tmp"
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    got, give = ctx.Pipe(duplex=False)
    receiver = ctx.Process(target=_receive, args=(listener, str(path), give))
    receiver.start()
    sender = ctx.Process(target=_send, args=(port, nbytes))
    sender.start()
    try:
        if not got.poll(600):
            raise RuntimeError("the floor's receiver did not report")
        result = got.recv()
    finally:
        sender.join(30)
        receiver.join(30)
        listener.close()
        path.unlink(missing_ok=True)
    return result
