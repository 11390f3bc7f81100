"""The intra-broker channel: one worker asks another to run a method for a
partition or group it owns, and awaits the answer.

What can be called is declared: a worker serves ``RemoteServices``, its
services by name (``partitions``, ``groups``), and of each only the methods its
class lists in ``REMOTE_METHODS``; a call names one as ``"service.method"``.
Any other name is refused (logged, and answered to the caller as an error).

Each worker listens on an abstract-namespace Unix socket named after the
broker (the acceptor's pid) and its index; peers connect lazily and reconnect
after a restart.  Frames are a 4-byte length and a pickle of
``(call id, method, args)`` one way and ``(call id, ok, result)`` back; both
ends are the same program, so pickle is a fair codec.  Calls are answered
concurrently and may complete out of order, matched by call id.

A call to a peer that is down (restarting) raises ``PeerUnavailable``; the
request handler answers the client with a retriable error for those
partitions, as Kafka does while a partition moves.
"""

import asyncio
import itertools
import logging
import pickle
import socket
import struct

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
_CONNECT_TIMEOUT_S = 2.0


class PeerUnavailable(Exception):
    pass


class UnknownRemoteMethod(LookupError):
    """A call names no declared method of a served service."""


class RemoteServices:
    """A worker's services by name, and the methods of each that may be called
    by name (from a peer, or locally the same way): those its class declares
    in ``REMOTE_METHODS``, bound once, here."""

    def __init__(self, services: dict):
        self._services = dict(services)
        self._methods = {f"{name}.{method}": getattr(service, method)
                         for name, service in self._services.items() for method in service.REMOTE_METHODS}

    def __getitem__(self, name: str):
        return self._services[name]

    def method(self, name: str):
        """The bound method called ``"service.method"``; UnknownRemoteMethod if undeclared."""
        found = self._methods.get(name)
        if found is None:
            raise UnknownRemoteMethod(f"{name!r} is not a remote method")
        return found


def socket_name(broker_tag: str, worker: int) -> str:
    return f"\0hpbroker-{broker_tag}-worker-{worker}"


async def _read_frame(reader: asyncio.StreamReader):
    header = await reader.readexactly(4)
    return pickle.loads(await reader.readexactly(_LENGTH.unpack(header)[0]))


def _frame(obj) -> bytes:
    body = pickle.dumps(obj, protocol=5)
    return _LENGTH.pack(len(body)) + body


class PeerServer:
    """Serves calls from the other workers on the declared methods of ``services``."""

    def __init__(self, broker_tag: str, index: int, services: RemoteServices):
        self.name = socket_name(broker_tag, index)
        self.services = services
        self._server = None

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.name)
        self._server = await asyncio.start_unix_server(self._serve, sock=sock)

    async def _serve(self, reader, writer) -> None:
        try:
            while True:
                call_id, method, args = await _read_frame(reader)
                asyncio.get_running_loop().create_task(self._answer(writer, call_id, method, args))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the peer went away, or this worker is stopping
        finally:
            writer.close()

    async def _answer(self, writer, call_id, method, args) -> None:
        try:
            result = self.services.method(method)(*args)
            if asyncio.iscoroutine(result):
                result = await result
            reply = (call_id, True, result)
        except UnknownRemoteMethod as exc:
            log.error("peer call refused: %s", exc)
            reply = (call_id, False, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # the caller decides; this worker keeps serving
            log.exception("peer call %s failed", method)
            reply = (call_id, False, f"{type(exc).__name__}: {exc}")
        try:
            writer.write(_frame(reply))
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
                call_id, ok, result = await _read_frame(self.reader)
                future = self.pending.pop(call_id, None)
                if future is not None and not future.done():
                    if ok:
                        future.set_result(result)
                    else:
                        future.set_exception(RuntimeError(result))
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
    """Calls methods on the other workers."""

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

    async def call(self, worker: int, method: str, *args):
        conn = await self._connection(worker)
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        conn.pending[call_id] = future
        try:
            conn.writer.write(_frame((call_id, method, args)))
        except (ConnectionError, RuntimeError) as exc:
            conn.pending.pop(call_id, None)
            raise PeerUnavailable(str(exc)) from None
        return await future

    def close(self) -> None:
        for conn in self._connections.values():
            conn.task.cancel()
            conn.fail_all()
        self._connections.clear()
