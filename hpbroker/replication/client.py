"""The client side of the wire: one connection that sends requests and awaits
their responses, as a broker talks to another (a follower fetching from its
leader).  This is its asyncio part; the frames are ``protocol.client_codec``'s.

Requests are pipelined: each gets a correlation id and a future; responses are
matched to them in order (Kafka answers a connection's requests in the order
they came).  A failed connection fails every pending request with
``ConnectionError`` and the owner connects anew.

The connection is a buffered protocol: a response is received straight into a
buffer of its own (``FrameReader``), decoded and handed to its future in the
read callback that completed it, with no reader task between.  A request that
writes itself (``fetch_request.ReplicaFetch``) also reads its own answer
(``read_answer``), which may keep slices of that buffer; any other is a kio
request, read back with kio.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from collections import deque
from typing import Any, Callable, cast

from hpbroker.protocol.client_codec import MAX_RESPONSE_BYTES, decode_response, encode_request
from hpbroker.protocol.exceptions import FrameTooLarge
from hpbroker.protocol.framing import FrameReader
from hpbroker.security.login import log_in
from hpbroker.security.settings import ListenerSecurity, Login
from hpbroker.security.tls import describe_failure

_correlation_id = struct.Struct(">i")
_login: Login | None = None  # how this process's connections to other brokers log in (None: they do not)
_tls: ssl.SSLContext | None = None  # ... and encrypt (None: they do not)


def use_security(security: ListenerSecurity) -> None:
    """Set as a worker starts (and reloads), from the listener's settings: every
    broker of a cluster serves the same listener, so one login and one TLS
    context reach them all."""
    global _login, _tls
    _login = security.login
    _tls = security.tls.client_context if security.tls is not None else None


class ClientConnection(asyncio.BufferedProtocol):
    def __init__(self, client_id: str):
        self.client_id = client_id
        self._ids = itertools.count(1)
        # (correlation id, how to read the answer, the future awaiting it), in the order sent
        self._pending: deque[tuple[int, Callable[[memoryview], Any], asyncio.Future]] = deque()
        self._frames = FrameReader(MAX_RESPONSE_BYTES)
        self._transport: asyncio.Transport | None = None
        self._error: ConnectionError | None = None  # set once: the connection is done
        self._lost = asyncio.get_running_loop().create_future()

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, timeout: float = 5.0) -> "ClientConnection":
        """A connection to a broker, over TLS and logged in as the brokers'
        listener asks (``use_security``); a failed handshake or login fails it
        as a ConnectionError."""
        loop = asyncio.get_running_loop()
        try:
            _transport, connection = await asyncio.wait_for(
                loop.create_connection(lambda: cls(client_id), host, port, ssl=_tls,
                                       server_hostname=host if _tls is not None else None), timeout)
        except ssl.SSLError as exc:  # an OSError, but not a network failure: say what TLS refused
            raise ConnectionError(f"TLS handshake with {host}:{port} failed: {describe_failure(exc)}") from None
        if _login is not None:
            try:
                await asyncio.wait_for(log_in(connection, _login), timeout)
            except BaseException:
                connection.close()
                raise
        return connection

    @property
    def closed(self) -> bool:
        return self._error is not None

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's (``sockname``, ``peername``...), as asyncio's own."""
        return default if self._transport is None else self._transport.get_extra_info(name, default)

    async def send(self, request, timeout: float = 30.0):
        """The response to ``request``; ConnectionError when the connection fails
        or the answer does not come within ``timeout`` seconds."""
        if self._error is not None or self._transport is None:
            raise ConnectionError("connection closed")
        loop = asyncio.get_running_loop()
        correlation_id = next(self._ids) & 0x7FFFFFFF
        future = loop.create_future()
        encode = getattr(request, "encode", None)  # a request that writes and reads itself; else kio's
        if encode is not None:
            frame, read = encode(correlation_id, self.client_id), request.read_answer
        else:
            frame = encode_request(request, correlation_id, self.client_id)
            api_key, version = int(request.__api_key__), int(request.__version__)

            def read(answer: memoryview):
                return decode_response(api_key, version, bytes(answer))[1]
        self._transport.write(frame)
        self._pending.append((correlation_id, read, future))
        # a timer on the future itself: no task to wrap it in, nothing to shield
        timer = loop.call_later(timeout, self._expire, future, timeout)
        try:
            return await future  # a cancelled caller cancels it: its answer is then dropped
        finally:
            timer.cancel()

    def _expire(self, future: asyncio.Future, timeout: float) -> None:
        if not future.done():
            future.set_exception(ConnectionError(f"no answer within {timeout:g} s"))
            self.close()  # later answers on this stream could no longer be matched

    # --- asyncio.BufferedProtocol --------------------------------------------------------
    def connection_made(self, transport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self._error is not None:
            return
        try:
            for frame in self._frames.buffer_updated(nbytes):
                self._answer(frame)
            if self._frames.failed is not None:  # after whole answers, in the same read
                raise self._frames.failed
        except FrameTooLarge as exc:
            self._fail(ConnectionError(f"response size {exc.size} is not plausible"))
        except ConnectionError as exc:
            self._fail(exc)
        except Exception as exc:  # an undecodable response: the stream cannot be trusted
            self._fail(ConnectionError(f"bad response: {exc!r}"))

    def _answer(self, frame: memoryview) -> None:
        if not self._pending:
            raise ConnectionError("a response nobody asked for")
        correlation_id, read, future = self._pending[0]
        got_id = _correlation_id.unpack_from(frame, 0)[0]
        if got_id != correlation_id:
            raise ConnectionError(f"response {got_id} where {correlation_id} was due")
        answer = read(frame)  # an undecodable one fails it with the rest, still pending
        self._pending.popleft()
        if not future.done():  # its caller may have given up (cancelled, or timed out)
            future.set_result(answer)

    def eof_received(self) -> bool:
        return False  # close: no request can be answered after the leader's end of stream

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError(f"connection lost: {exc!r}" if exc is not None
                                   else "connection lost: closed by the other side"))
        if not self._lost.done():
            self._lost.set_result(None)

    # --- closing ----------------------------------------------------------------------------
    def _fail(self, error: ConnectionError) -> None:
        """The connection is done: fail what is pending with ``error`` and close."""
        if self._error is None:
            self._error = error
        if self._transport is not None:
            self._transport.close()
        while self._pending:
            future = self._pending.popleft()[2]
            if not future.done():
                future.set_exception(self._error)

    def close(self) -> None:
        self._fail(ConnectionError("connection closed"))

    async def wait_closed(self) -> None:
        if self._transport is None:
            return
        await asyncio.shield(self._lost)
