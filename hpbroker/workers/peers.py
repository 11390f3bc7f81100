"""The intra-broker channel: a worker asks another to answer an owner call
(``owner_calls``) for a partition or group it owns, and awaits the result.

Every worker listens on an abstract-namespace Unix socket named after the
broker (the acceptor's pid) and its index; peers connect lazily and reconnect
after a restart.  A frame is a 4-byte length and one message of
``owner_calls``' codec: ``(call id, call)`` one way, ``(call id, result)`` back.
Only the declared call types decode; anything else is answered ``Failed``
when its call id can be read, logged and dropped otherwise, and never ends
the channel.  Calls are answered concurrently and may complete out of order,
matched by call id.

A call to a peer that is down (restarting) raises ``PeerUnavailable``; the
owner client (``owners.py``) turns it into the call's retriable error.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct

from hpbroker.errors import ErrorCode
from hpbroker.workers import owner_calls
from hpbroker.workers.owner_calls import ChannelError, Failed, OwnerError

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
_CONNECT_TIMEOUT_S = 2.0
MAX_FRAME_BYTES = 256 << 20  # a larger length prefix is a broken stream


class PeerUnavailable(Exception):
    pass


def socket_name(broker_tag: str, worker: int) -> str:
    return f"\0hpbroker-{broker_tag}-worker-{worker}"


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = _LENGTH.unpack(await reader.readexactly(4))[0]
    if size > MAX_FRAME_BYTES:
        log.error("peer channel closed: a frame of %d bytes", size)
        raise ConnectionError(f"a peer frame of {size} bytes")
    return await reader.readexactly(size)


def _frame(body: bytes) -> bytes:
    return _LENGTH.pack(len(body)) + body


class PeerServer:
    """Answers the other workers' calls with this worker's ``LocalOwner``: the
    same code, and the same failures, as this worker's own handlers get."""

    def __init__(self, broker_tag: str, index: int, local):
        self.name = socket_name(broker_tag, index)
        self.local = local  # owners.LocalOwner
        self._server = None

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.name)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock)

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                frame = await _read_frame(reader)
                try:
                    call_id, call = owner_calls.decode_call(frame)
                except ChannelError as exc:
                    log.error("peer call refused: %s", exc)
                    if exc.call_id is not None:
                        self._reply(writer, exc.call_id, Failed(ErrorCode.unknown_server_error, str(exc)))
                    continue
                asyncio.get_running_loop().create_task(self._answer(writer, call_id, call))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the peer went away, or this worker is stopping
        finally:
            writer.close()

    async def _answer(self, writer, call_id: int, call) -> None:
        try:
            result = await self.local.call(call)
        except OwnerError as exc:
            result = Failed(exc.error, str(exc))
        self._reply(writer, call_id, result)

    @staticmethod
    def _reply(writer, call_id: int, result) -> None:
        try:
            writer.write(_frame(owner_calls.encode(call_id, result)))
        except (ConnectionError, RuntimeError):
            pass

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


class _Connection:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer
        self.pending: dict[int, asyncio.Future] = {}
        self.task = asyncio.get_running_loop().create_task(self._read_replies())

    async def _read_replies(self) -> None:
        try:
            while True:
                frame = await _read_frame(self.reader)
                try:
                    call_id, result = owner_calls.decode_result(frame)
                except ChannelError as exc:
                    log.error("a peer's answer refused: %s", exc)
                    if exc.call_id is None:
                        continue
                    call_id, result = exc.call_id, Failed(ErrorCode.unknown_server_error, str(exc))
                future = self.pending.pop(call_id, None)
                if future is not None and not future.done():
                    future.set_result(result)
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            self.fail_all()

    def fail_all(self) -> None:
        for future in self.pending.values():
            if not future.done():
                future.set_exception(PeerUnavailable("peer closed the channel"))
        self.pending.clear()
        self.writer.close()


class PeerClient:
    """Sends owner calls to the other workers."""

    def __init__(self, broker_tag: str):
        self.broker_tag = broker_tag
        self._connections: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()

    async def _connection(self, worker: int) -> _Connection:
        conn = self._connections.get(worker)
        if conn is not None and not conn.task.done():
            return conn
        pending = self._connecting.get(worker)
        if pending is None:
            pending = asyncio.get_running_loop().create_task(self._connect(worker))
            self._connecting[worker] = pending
        try:
            return await asyncio.shield(pending)
        finally:
            if pending.done():
                self._connecting.pop(worker, None)

    async def _connect(self, worker: int) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(socket_name(self.broker_tag, worker)), _CONNECT_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError) as exc:
            raise PeerUnavailable(f"worker {worker} is not reachable: {exc}") from None
        conn = _Connection(reader, writer)
        self._connections[worker] = conn
        return conn

    async def call(self, worker: int, call):
        """``call``'s result (or ``Failed``) from worker ``worker``; PeerUnavailable
        when it cannot be reached or goes away before answering."""
        conn = await self._connection(worker)
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        conn.pending[call_id] = future
        try:
            conn.writer.write(_frame(owner_calls.encode(call_id, call)))
        except (ConnectionError, RuntimeError) as exc:
            conn.pending.pop(call_id, None)
            raise PeerUnavailable(str(exc)) from None
        return await future

    def close(self) -> None:
        for conn in self._connections.values():
            conn.task.cancel()
            conn.fail_all()
        self._connections.clear()
