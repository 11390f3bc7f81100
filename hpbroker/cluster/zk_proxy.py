"""The broker's one ZooKeeper session, lent to its workers.

The acceptor holds the session (its registration, its controller candidacy,
the watches behind the cluster image); a worker's writes (ISR changes, the
admin writes of ``cluster/admin.py``) are made on it too.  The acceptor
listens on an abstract Unix socket named after the broker; a worker connects
from its event loop (``ProxyOps``) and sends operations, each answered when
ZooKeeper answers, in any order.

The frames and the operations are ``zk_ops``'; a frame that is no request
closes that connection, with a log line.

On the acceptor's side each connection has a reader thread, which starts each
operation with kazoo's asynchronous API, and a writer thread, which sends the
answers kazoo's callbacks queue: a worker that stops reading (paused) never
blocks kazoo's threads, which the acceptor's own session needs.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import queue
import socket
import threading
from collections.abc import Callable

import msgspec
from kazoo.exceptions import KazooException

from hpbroker.cluster.zk_ops import (
    FRAME_LENGTH,
    MAX_FRAME,
    NODE_ERRORS,
    REPLY_DECODER,
    REQUEST_DECODER,
    Answer,
    Children,
    Create,
    Done,
    EnsurePath,
    Exists,
    Generation,
    Get,
    Multi,
    MultiDone,
    Names,
    Node,
    Outcome,
    Refused,
    Reply,
    Request,
    Reread,
    SetData,
    Stat,
    Written,
    error_named,
    frame,
    proxy_address,
    transaction_of,
    unflat_op,
    wire_op,
)

log = logging.getLogger(__name__)


# --- the acceptor's side -------------------------------------------------------------------------
def _refused(exc: BaseException) -> Refused:
    name = type(exc).__name__
    return Refused(name if name in NODE_ERRORS else repr(exc))


def _outcome_of(op, value) -> Outcome:
    if isinstance(op, Get):
        data, stat = value
        return Node(data or b"", stat.version, stat.mzxid)
    if isinstance(op, Exists):
        return Done(value is not None)
    if isinstance(op, Children):
        return Names(list(value))
    if isinstance(op, SetData):
        return Written(value.version, value.mzxid)
    if isinstance(op, Multi):
        return MultiDone([type(r).__name__ if isinstance(r, Exception) else "" for r in value])
    return Done()


class ProxyServer:
    """Serves the workers' operations on ``client`` (the acceptor's session);
    ``reread()`` re-reads the partition states and returns the generation
    published with them."""

    def __init__(self, client, broker_tag: str, reread: Callable[[], int]):
        self.client = client
        self.reread = reread
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(proxy_address(broker_tag))
        self._listener.listen(64)
        self._closed = False
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="zookeeper-proxy", daemon=True).start()

    def close(self) -> None:
        self._closed = True
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close_in_child(self) -> None:
        """In a forked worker: this process's copies of the sockets, nothing else
        (the threads did not survive the fork)."""
        self._listener.close()
        for conn in self._connections:
            conn.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self._connections.add(conn)
            replies: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=self._write, args=(conn, replies), name="zookeeper-proxy-out",
                             daemon=True).start()
            threading.Thread(target=self._read, args=(conn, replies), name="zookeeper-proxy-in",
                             daemon=True).start()

    def _read(self, conn: socket.socket, replies: queue.SimpleQueue) -> None:
        try:
            while True:
                header = _recv_exactly(conn, FRAME_LENGTH.size)
                if header is None:
                    return
                (size,) = FRAME_LENGTH.unpack(header)
                body = _recv_exactly(conn, size) if size <= MAX_FRAME else None
                if body is None:
                    if size > MAX_FRAME:
                        log.warning("a worker sent a ZooKeeper request of %d bytes; closing its connection", size)
                    return
                try:
                    request = REQUEST_DECODER.decode(body)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    log.warning("a worker sent no ZooKeeper request (%s); closing its connection", exc)
                    return
                self._start(request, replies)
        except OSError:
            return
        finally:
            replies.put(None)  # the writer ends, and closes the connection
            with self._lock:
                self._connections.discard(conn)

    def _start(self, request: Request, replies: queue.SimpleQueue) -> None:
        op = request.op
        if isinstance(op, Reread):
            threading.Thread(target=self._reread, args=(request.id, replies), daemon=True).start()
            return
        client = self.client
        try:
            if isinstance(op, Get):
                pending = client.get_async(op.path)
            elif isinstance(op, Exists):
                pending = client.exists_async(op.path)
            elif isinstance(op, Children):
                pending = client.get_children_async(op.path)
            elif isinstance(op, Create):
                pending = client.create_async(op.path, op.data, makepath=op.makepath)
            elif isinstance(op, EnsurePath):
                pending = client.ensure_path_async(op.path)
            elif isinstance(op, SetData):
                pending = client.set_async(op.path, op.data, version=op.version)
            else:
                pending = transaction_of(client, [unflat_op(o) for o in op.ops]).commit_async()
        except (KazooException, ValueError, TypeError) as exc:
            replies.put(Reply(request.id, _refused(exc)))
            return

        def answered(result) -> None:  # on kazoo's thread: only queue it
            try:
                outcome = _outcome_of(op, result.get_nowait())
            except Exception as exc:  # noqa: BLE001 - sent to the worker as the call's failure
                outcome = _refused(exc)
            replies.put(Reply(request.id, outcome))
        pending.rawlink(answered)

    def _reread(self, call_id: int, replies: queue.SimpleQueue) -> None:
        try:
            outcome: Outcome = Generation(self.reread())
        except Exception as exc:  # noqa: BLE001 - the worker asks again
            outcome = _refused(exc)
        replies.put(Reply(call_id, outcome))

    @staticmethod
    def _write(conn: socket.socket, replies: queue.SimpleQueue) -> None:
        try:
            while (reply := replies.get()) is not None:
                conn.sendall(frame(reply))
        except OSError:
            pass
        finally:
            conn.close()


def _recv_exactly(conn: socket.socket, size: int) -> bytes | None:
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = conn.recv_into(view[got:])
        if n == 0:
            return None
        got += n
    return bytes(buffer)


# --- the worker's side -------------------------------------------------------------------------
class ProxyOps:
    """``zk_ops``' operations, made on the acceptor's session (connected on
    first use from the running loop, again after the connection broke or from
    another loop)."""

    def __init__(self, broker_tag: str):
        self.address = proxy_address(broker_tag)
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task | None = None
        self._connecting: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def _ask(self, op) -> Outcome:
        if self._closed:
            raise KazooException("no ZooKeeper session (stopping)")
        writer = await self._connected()
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        self._pending[call_id] = future
        try:
            writer.write(frame(Request(call_id, op)))
            return await future
        finally:
            self._pending.pop(call_id, None)

    async def _connected(self) -> asyncio.StreamWriter:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # (the first call, or a new loop: nothing of the old one is usable)
            self._loop, self._connecting, self._writer = loop, asyncio.Lock(), None
        assert self._connecting is not None
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                try:
                    reader, self._writer = await asyncio.open_unix_connection(self.address)
                except OSError as exc:
                    raise KazooException(f"the acceptor's ZooKeeper session is out of reach: {exc}") from None
                self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))
            return self._writer

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                (size,) = FRAME_LENGTH.unpack(await reader.readexactly(FRAME_LENGTH.size))
                reply = REPLY_DECODER.decode(await reader.readexactly(size))
                future = self._pending.get(reply.id)
                if future is not None and not future.done():
                    future.set_result(reply.outcome)
        except (asyncio.IncompleteReadError, OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
            if not isinstance(exc, asyncio.IncompleteReadError):
                log.warning("the acceptor's ZooKeeper answers broke off: %r", exc)
        finally:
            if self._writer is not None:
                self._writer.close()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(KazooException("the acceptor's ZooKeeper session went away"))

    def close(self) -> None:
        self._closed = True
        if self._writer is not None:
            self._writer.close()
        if self._reader_task is not None:
            self._reader_task.cancel()

    @staticmethod
    def _expect(outcome: Outcome, kind: type[Answer]) -> Answer:
        if isinstance(outcome, Refused):
            raise error_named(outcome.error, f"ZooKeeper refused: {outcome.error}")
        if not isinstance(outcome, kind):
            raise KazooException(f"unexpected answer {outcome!r}")
        return outcome

    async def get(self, path: str) -> tuple[bytes, Stat]:
        node = self._expect(await self._ask(Get(path)), Node)
        return node.data, Stat(node.version, node.mzxid)

    async def exists(self, path: str) -> bool:
        return self._expect(await self._ask(Exists(path)), Done).found

    async def children(self, path: str) -> list[str]:
        return self._expect(await self._ask(Children(path)), Names).names

    async def create(self, path: str, data: bytes = b"", makepath: bool = False) -> None:
        self._expect(await self._ask(Create(path, data, makepath)), Done)

    async def ensure_path(self, path: str) -> None:
        self._expect(await self._ask(EnsurePath(path)), Done)

    async def set(self, path: str, data: bytes, version: int) -> Stat:
        written = self._expect(await self._ask(SetData(path, data, version)), Written)
        return Stat(written.version, written.mzxid)

    async def multi(self, ops: list[tuple]) -> list:
        done = self._expect(await self._ask(Multi([wire_op(op) for op in ops])), MultiDone)
        return [error_named(name) if name else True for name in done.errors]

    async def reread(self) -> int:
        """Have the acceptor read the partition states again; the board's generation after it."""
        return self._expect(await self._ask(Reread()), Generation).generation
