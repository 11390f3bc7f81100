"""One client connection: frames in, requests handled one at a time in order
(as Kafka does, so responses keep the request order), responses out.  One
exception to "one at a time": a request whose answer is owed (``Later``: an
acks=all produce, appended, waiting for its replicas) lets the next request
be handled; its answer, and every one after it, is then sent by the owed
answers' sender in request order.

A request that arrives while the connection has nothing in hand is handled
at once, in the read callback (``eager.py``), and carried on by a task only
if it waits; the others queue for the serving task, which takes the next
frame only after such a started request is done.

Between requests, a connection whose partition requests all go to another
worker's partitions is handed to that worker (``affinity.py``): ``move``.

Bad input costs only this connection: an oversized frame, an unknown API key,
an unsupported version (except ApiVersions, which gets Kafka's error-35
answer) or a malformed body is logged with the client and closed; every other
connection carries on.  A handler that fails is logged with its traceback and
answered with Kafka's error code, as Kafka does.
"""

import asyncio
import collections
import contextvars
import logging
import os
import socket
import struct
import time
from typing import IO, cast

from hpbroker.protocol import (
    ErrorCode,
    FrameReader,
    FrameTooLarge,
    MalformedRequest,
    UnsupportedApiKey,
    UnsupportedVersion,
    decode_request,
    encode_response,
    unsupported_api_versions_response,
)
from hpbroker.protocol.error_response import error_response
from hpbroker.protocol.schemas import API_VERSIONS, FETCH, PRODUCE, kio_version
from hpbroker.security.principal_rules import ANONYMOUS
from hpbroker.security.sasl import ALLOWED_BEFORE, SASL_AUTHENTICATE, SESSION, SaslFailure, SaslSession, Stage
from hpbroker.security.tls import TlsSettings
from hpbroker.server.control_channel import Peer
from hpbroker.workers import affinity, eager, observe, partition_moves
from hpbroker.workers.authorization import acl_host
from hpbroker.workers.client_identity import CLIENT_HOST, CLIENT_IP, LISTENER, PRINCIPAL
from hpbroker.workers.context import CloseConnection, Later
from hpbroker.workers.fetch_response import FileRegion
from hpbroker.workers.gathering import Gathering

log = logging.getLogger(__name__)

_MAX_QUEUED = 64  # frames buffered before reading pauses (back-pressure)
# ... or bytes of them: a producer pipelining megabyte requests faster than they are
# appended would otherwise hold 64 of them here, each in memory fresh to the kernel
# (see protocol/framing.py) instead of a reused buffer, and up to 64 times
# socket.request.max.bytes per connection
_MAX_QUEUED_BYTES = 4 * 2**20
_MAX_OWED = 64  # answers owed at once before handling waits for the oldest
_TLS_CHUNK_BYTES = 256 << 10  # records read (and held, while the client is slow) at once for a TLS answer


class _RegionFile:
    """The file object ``loop.sendfile`` wants, over a descriptor we keep open."""

    def __init__(self, fd: int):
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def seek(self, offset: int, whence: int = 0) -> int:
        return offset


def _close_regions(pieces) -> None:
    """Each FileRegion of a response owns a duplicate descriptor (the segment
    cache may close its own meanwhile): close them once the response is out."""
    for piece in pieces or ():
        if isinstance(piece, FileRegion):
            os.close(piece.fd)


def _close_made_regions(task: asyncio.Task) -> None:
    if not task.cancelled() and task.exception() is None:
        _close_regions(task.result())


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(self, ctx, routes, on_close, move=None, gathering: Gathering | None = None,
                 sasl: SaslSession | None = None, tls: TlsSettings | None = None, peer: Peer | None = None):
        self.ctx = ctx
        self.origin = peer  # its client address and the name of the listener it came in on, as the acceptor saw
        self.listener = peer.listener if peer is not None else None
        self.certificate_principal = ANONYMOUS  # on an SSL listener, once the handshake named it
        self.sasl = sasl  # on a SASL listener: the login, which must succeed before anything but ApiVersions
        self.tls = tls  # on a TLS listener: records are read from the files and written through it (no sendfile)
        self.routes = routes
        self.on_close = on_close
        self.move = move  # (connection, worker) -> moved: hand this connection's socket to that worker
        self.route = affinity.Route(ctx.config["connection.move.after.requests"] if move is not None else 0,
                                    gathering)
        self.source = partition_moves.connection_source()  # who appends, to the partitions' owners
        self.reader = FrameReader(ctx.config["socket.request.max.bytes"])
        if sasl is not None:  # until the login, a frame is a login's: small (Kafka's CVE-2022-34917 fix)
            self.reader.max_frame_bytes = min(self.reader.max_frame_bytes, ctx.config["sasl.server.max.receive.size"])
        self.queue: asyncio.Queue = asyncio.Queue()
        self.queued_bytes = 0  # of the frames in ``queue``
        self.transport = cast(asyncio.Transport, None)  # set by connection_made, before anything else runs
        self.sock_fd = -1
        self.sock = None  # the transport's socket, for TCP_CORK around file answers (None: not to be corked)
        self.peer = "?"
        self.paused = False
        self.holding = False  # reading paused at a frame boundary until the connection moves (``_hold_to_move``)
        self.closing = False
        self.task = None
        self.context = contextvars.copy_context()  # the client's, for every step of its requests
        self.idle = False  # the serving task waits for a frame: the next one may be handled as it arrives
        self.started: asyncio.Task | None = None  # a request started as it arrived, carried on in this task
        self.current = None  # header of the request being handled, for error context
        self.current_request = None
        self.dropped = False  # closed by us for bad input: queued frames are not handled
        self.draining = False  # the worker is stopping: reading stays paused
        self.writable = asyncio.Event()
        self.writable.set()
        # answers not yet sent, in request order, while any is owed: pieces, or the
        # task making them; sent by the sender task alone, which ends when none is left
        self.owed: collections.deque = collections.deque()
        self.sender: asyncio.Task | None = None
        self.awaited: asyncio.Task | None = None  # the owed answer the sender waits on, all before it sent
        self.owed_room = asyncio.Event()
        self.owed_room.set()

    # --- asyncio.BufferedProtocol ---------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream socket's, or TLS's over it
        self.sock = transport.get_extra_info("socket") if self.tls is None else None
        self.sock_fd = self.sock.fileno() if self.sock is not None else -1  # for sendfile straight to it
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
            self.route.client_port = peer[1]
        else:
            self.peer = str(peer)
        if self.draining:  # the worker began stopping during the TLS handshake
            self.closing = True
            transport.close()
            return
        if self.tls is not None and self.sasl is None and not self._certificate_mapped():
            return
        self.context.run(self._enter)
        self.task = asyncio.get_running_loop().create_task(self._serve(), context=self.context)

    def _certificate_mapped(self) -> bool:
        """On an SSL listener the client's principal is its certificate's
        (``ssl.principal.mapping.rules``); one no rule maps is refused, as in Kafka."""
        tls = cast(TlsSettings, self.tls)
        ssl_object = self.transport.get_extra_info("ssl_object")
        try:
            principal = tls.principal(ssl_object) if ssl_object is not None else None
        except ValueError as exc:  # a certificate OpenSSL took and ``cryptography`` cannot read
            self._drop(f"cannot read its certificate's subject ({exc})")
            return False
        if principal is None:
            self._drop("no rule of ssl.principal.mapping.rules maps its certificate's subject")
            return False
        self.certificate_principal = principal
        # a certificate is a login: said as a SASL login is (an anonymous client only when asked)
        log.log(logging.DEBUG if principal == ANONYMOUS else logging.INFO, "%s connected from %s over TLS",
                principal, self.peer)
        return True

    def _enter(self) -> None:
        address = self.peer.rsplit(":", 1)[0]
        CLIENT_HOST.set("/" + address)
        CLIENT_IP.set(acl_host(address))
        LISTENER.set(self.listener)
        PRINCIPAL.set(self.certificate_principal)
        SESSION.set(self.sasl)
        affinity.ROUTE.set(self.route)
        partition_moves.CALLER.set(self.source)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        if self.closing:
            return
        self.ctx.bytes_in += nbytes
        try:
            frames = self.reader.buffer_updated(nbytes)
        except FrameTooLarge as exc:
            self._drop(f"request of {exc.size} bytes exceeds {self._limit_key()}={exc.limit}")
            return
        handled_here = False
        for frame in frames:
            if self.closing:  # a request before this one was the last (the connection dropped)
                return
            if self.idle and self.started is None and self.queue.empty() and not self.draining:
                self._start(frame)
                handled_here = True
            else:
                self.queue.put_nowait(frame)
                self.queued_bytes += len(frame)
        failed = self.reader.failed  # after whole requests, in the same read
        if failed is not None and not self.closing:
            self._drop(f"request of {failed.size} bytes exceeds {self._limit_key()}={failed.limit}")
            return
        if self.move is not None and not self.closing:
            self._hold_to_move()
        if handled_here and self.started is None and self.queue.empty() and self._moved():
            self.queue.put_nowait(None)  # handed to another worker: the serving task ends
        if (self.queue.qsize() >= _MAX_QUEUED or self.queued_bytes >= _MAX_QUEUED_BYTES) and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def _limit_key(self) -> str:
        """The setting that bounds this connection's frames now."""
        if self.sasl is not None and not self.sasl.authenticated:
            return "sasl.server.max.receive.size"
        return "socket.request.max.bytes"

    def _logged_in(self) -> None:
        """The login succeeded: requests may be as large as any client's."""
        session = cast(SaslSession, self.sasl)
        log.info("%s logged in from %s with %s", session.principal, self.peer, session.mechanism)
        self.reader.max_frame_bytes = self.ctx.config["socket.request.max.bytes"]

    def _hold_to_move(self) -> None:
        """A connection whose requests go to another worker moves only between
        requests, with nothing of the stream here; one that keeps requests in
        flight (librdkafka pipelines up to five, idempotent) is never so.  Once
        a move is due, it reads no further than the request in hand, then
        nothing: the requests here finish, their answers go out, and the
        connection moves with the client's next bytes still in the kernel
        (``_moved``, called as each of those ends)."""
        reader = self.reader
        if not reader.bounded:
            if self.route.elsewhere(self.ctx.index) is None:
                return
            reader.stop_at_frame_end()
        if not reader.buffered and not self.holding:
            self.holding = True
            self.transport.pause_reading()

    def _release_hold(self) -> None:
        """No move after all (or not now): read on."""
        if self.reader.bounded:
            self.reader.stop_at_frame_end(False)
        if self.holding:
            self.holding = False
            if not (self.paused or self.draining or self.closing):
                self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def connection_lost(self, exc) -> None:
        self.writable.set()
        self.closing = True
        self.queue.put_nowait(None)  # finish what is in flight, then stop
        self.on_close(self)

    # --- stopping -------------------------------------------------------------
    def drain(self) -> None:
        """The worker is stopping: read nothing more, finish the request in hand."""
        self.draining = True  # a TLS handshake still under way: closed as it ends (connection_made)
        if self.transport is None:
            return
        self.transport.pause_reading()
        self.queue.put_nowait(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def busy_with(self) -> str | None:
        """The request this connection is handling, for the log of a stop that waited on it."""
        header = self.current
        if header is None:
            return None
        return f"a request from {self.peer} (api {header.api_key} v{header.api_version}, correlation id " \
               f"{header.correlation_id})"

    # --- serving --------------------------------------------------------------
    def _drop(self, why: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, why)
        self.closing = self.dropped = True
        self.transport.abort()

    def _start(self, frame) -> None:
        """Handle a request as it arrives, while the serving task is idle: most
        finish here, answered, without a turn of the loop (``eager.py``); one that
        waits goes on in a task of its own, and the serving task takes the next
        frame only after it."""
        going, self.started = eager.start(self._one(frame), self.context)
        if self.started is not None:
            self.started.add_done_callback(self._started_done)
        elif not going:
            self.queue.put_nowait(None)  # the connection is done for: the serving task ends

    def _started_done(self, task: asyncio.Task) -> None:
        """A request that waited is done.  With nothing queued behind it, the
        connection is as it was before that request: the next one starts in the
        read callback again, instead of going through the serving task (a
        wake-up and a turn of the loop, for every request after the first that
        waited on another worker)."""
        if task is not self.started or not self.queue.empty() or task.cancelled():
            return  # the serving task deals with it
        failure = task.exception()
        if failure is not None:  # _one answers a handler's failure itself: this is a bug of ours
            log.error("closing connection from %s: handling a request failed", self.peer, exc_info=failure)
            self.started = None  # reported here: the serving task just ends
            self.closing = self.dropped = True
            self.transport.abort()
            self.queue.put_nowait(None)
            return
        self.started = None
        if not task.result():
            self.queue.put_nowait(None)  # the connection is done for: the serving task ends
        elif self._moved():
            self.queue.put_nowait(None)  # handed to another worker: the serving task ends

    async def _serve(self) -> None:
        try:
            while True:
                if self.queue.empty() and self._moved():
                    return
                self.idle = True
                try:
                    frame = await self.queue.get()
                finally:
                    self.idle = False
                if self.started is not None:  # the request before this frame is still in hand
                    started, self.started = self.started, None
                    if not await started:
                        return
                # Requests already received are handled even if the client has gone
                # (an acks=0 produce still appends); a dropped connection stops here.
                if frame is None or self.dropped:
                    return
                self.queued_bytes -= len(frame)
                if self.paused and self.queue.qsize() < _MAX_QUEUED // 2 and \
                        self.queued_bytes < _MAX_QUEUED_BYTES // 2:
                    self.paused = False
                    if not self.holding:
                        self.transport.resume_reading()
                if not await self._one(frame):
                    return
        finally:
            if self.started is not None:  # cancelled while a started request was in hand
                self.started.cancel()
            if self.sender is not None and not self.dropped:
                await asyncio.shield(self.sender)  # owed answers go out before the connection is done

    async def _one(self, frame) -> bool:
        """Handle one request and send its answer, or owe it; False when the
        connection is done for (dropped, or its request failed without an answer)."""
        try:
            answer = await self._handle(frame)
        except Exception as exc:
            answer = self._answer_failure(exc, self.current, self.current_request)
            if answer is None:
                return False
        if self.sender is not None or isinstance(answer, asyncio.Task):
            if answer:
                self._owe(answer)
            if len(self.owed) >= _MAX_OWED:
                self.owed_room.clear()
                await self.owed_room.wait()
            return True
        return await self._send(answer)

    def _sendfile_now(self, region: FileRegion) -> int:
        """Bytes of ``region`` sent straight from the file to the socket, while
        the socket takes them; 0 if anything of ours is still queued before it.
        ``loop.sendfile`` sends the rest: it waits for room, but each call costs
        about a hundred µs of loop machinery (pausing reads, a writer callback,
        an extra turn of the loop), ten times the syscall a small region needs."""
        if self.transport.get_write_buffer_size() or self.transport.is_closing():
            return 0
        sent = 0
        while sent < region.size:
            try:
                n = os.sendfile(self.sock_fd, region.fd, region.position + sent, region.size - sent)
            except (BlockingIOError, InterruptedError):
                break
            if n == 0:  # the file ends before the region: loop.sendfile says so as before
                break
            sent += n
        return sent

    def _moved(self) -> bool:
        """Hand the connection to the worker its requests go to, when there is
        one and nothing of the stream is here (queued, part-read, owed or
        unsent): the next byte the client sends is read there."""
        if self.move is None:
            return False
        worker = self.route.elsewhere(self.ctx.index)
        if worker is None:
            self._release_hold()  # the requests since went elsewhere too
            return False
        if (self.sender is not None or self.started is not None or self.reader.buffered or self.closing
                or self.paused or self.draining):
            return False  # each ends in a call here again (a held connection reads the rest of its frame)
        if self.transport.get_write_buffer_size():
            self._release_hold()  # nothing calls again when the socket takes the rest: tried after later requests
            return False
        if not self.move(self, worker):
            self.route.streak = 0  # stays; looks again after as many requests
            self._release_hold()
            return False
        self.closing = True
        return True

    async def _send(self, pieces) -> bool:
        """Write one answer (and close its files); False when the connection was dropped for it."""
        try:
            if pieces and not self.transport.is_closing():
                await self._write(pieces)
            if self.sasl is not None and self.sasl.failed:  # the login's refusal is out: the connection ends
                self.closing = True
                self.transport.close()
                return False
            return True
        except (ConnectionError, OSError) as exc:
            self._drop(f"write failed: {exc}")
            return False
        finally:
            _close_regions(pieces)

    def _owe(self, answer) -> None:
        self.owed.append(answer)
        if self.sender is None:
            self.sender = asyncio.get_running_loop().create_task(self._send_owed())

    async def _send_owed(self) -> None:
        """Send the owed answers in request order, each once it is made (while
        this task runs, every answer goes through it)."""
        all_sent = False
        try:
            while self.owed:
                answer = self.owed.popleft()
                if len(self.owed) < _MAX_OWED:
                    self.owed_room.set()
                if isinstance(answer, asyncio.Task):
                    self.awaited = answer
                    try:
                        answer = await answer
                    except asyncio.CancelledError:
                        answer.add_done_callback(_close_made_regions)
                        raise
                    finally:
                        self.awaited = None
                if self.dropped:
                    _close_regions(answer)
                elif not await self._send(answer):
                    break
            else:
                all_sent = True
        finally:
            self.sender = None
            self.owed_room.set()
            while self.owed:  # dropped: what was made is discarded, its files closed
                left = self.owed.popleft()
                if isinstance(left, asyncio.Task):
                    left.add_done_callback(_close_made_regions)
                else:
                    _close_regions(left)
        # A client whose every answer is owed (acks=all, a group commit) leaves the
        # connection between its requests only here: it follows its partitions too.
        if all_sent and self.idle and self.started is None and self.queue.empty() and self._moved():
            self.queue.put_nowait(None)  # handed to another worker: the serving task ends

    async def _finish(self, header, request, started: float, later: Later, task: list[asyncio.Task]):
        """The rest of an owed answer (made in ``task[0]``); a failure there is
        answered as any handler's.  When the sender already waits on it (every
        answer before it is out), it is written here and now, a turn of the
        loop before the sender would wake to write it; nothing is left to send."""
        try:
            pieces = await later.rest
        except Exception as exc:
            return self._answer_failure(exc, header, request)
        observe.request_done(header.api_key, header.api_version, started)
        if (pieces and self.awaited is task[0] and self.writable.is_set() and not self.dropped
                and not self.transport.is_closing() and not any(isinstance(p, FileRegion) for p in pieces)):
            for piece in pieces:
                self.transport.write(piece)
                self.ctx.bytes_out += len(piece)
            return []
        return pieces

    def _answer_failure(self, exc: Exception, header, request):
        """A handler raised: log it with its traceback and the request's context,
        and answer with Kafka's error code in every place the response has one
        (KAFKA_STORAGE_ERROR for a failed disk operation, UNKNOWN_SERVER_ERROR
        otherwise), as Kafka does.  Where no such answer exists (Fetch, or a
        Produce with acks=0, which Kafka answers by closing) the connection is
        closed; None then."""
        context: dict[str, object] = {"client": self.peer}
        if header is not None:
            context.update(client_id=header.client_id, api_key=header.api_key, api_version=header.api_version,
                           correlation_id=header.correlation_id)
        log.exception("request from %s failed (%s)", self.peer,
                      ", ".join(f"{k}={v}" for k, v in context.items() if k != "client"), extra={"context": context})
        error = ErrorCode.kafka_storage_error if isinstance(exc, OSError) else ErrorCode.unknown_server_error
        answerable = header is not None and header.api_key != FETCH and not (
            header.api_key == PRODUCE and getattr(request, "acks", 1) == 0)
        if answerable and header is not None:
            try:
                response = error_response(header.api_key, kio_version(header.api_key, header.api_version), request,
                                          error, f"{type(exc).__name__}: {exc}"[:200])
                return [encode_response(header, response)]
            except Exception:
                log.exception("could not build an error answer for api key %d v%d", header.api_key,
                              header.api_version)
        self._drop("its request failed and has no error answer")
        return None

    async def _handle(self, frame):
        session = self.sasl
        if session is not None and session.stage is Stage.RAW_TOKENS:
            return await self._raw_token(session, frame)
        try:
            header, request = decode_request(frame)
        except UnsupportedVersion as exc:
            if exc.header.api_key == API_VERSIONS:
                return [encode_response(exc.header, unsupported_api_versions_response())]
            self._drop(f"unsupported version {exc.header.api_version} of api key {exc.header.api_key} "
                       f"(client {exc.header.client_id!r})")
            return None
        except UnsupportedApiKey as exc:
            self._drop(f"unknown api key {exc.header.api_key} (client {exc.header.client_id!r})")
            return None
        except MalformedRequest as exc:
            self._drop(f"malformed request: {exc}")
            return None
        self.current, self.current_request = header, request
        if session is not None and not session.authenticated and header.api_key not in ALLOWED_BEFORE:
            self._drop(f"api key {header.api_key} before the SASL login (client {header.client_id!r})")
            return None
        handler = self.routes.get(header.api_key)
        if handler is None:
            self._drop(f"api key {header.api_key} is advertised but has no handler")
            return None
        started = time.perf_counter()
        try:
            response = await handler(self.ctx, header, request)
        except CloseConnection as exc:
            self._drop(str(exc))
            return None
        if header.api_key == SASL_AUTHENTICATE and session is not None and session.authenticated:
            self._logged_in()
        if isinstance(response, Later):
            task: list[asyncio.Task] = []
            mirrored = request if response.request is None else response.request
            task.append(asyncio.get_running_loop().create_task(self._finish(header, mirrored, started, response, task)))
            return task[0]
        observe.request_done(header.api_key, header.api_version, started)
        if response is None:
            return None
        if isinstance(response, list):
            return response
        return [encode_response(header, response)]

    async def _raw_token(self, session: SaslSession, frame):
        """A bare SASL token (after SaslHandshake v0): answered with a bare one, or,
        when the login fails, by closing the connection."""
        try:
            token = await session.authenticate(bytes(frame))
        except SaslFailure as exc:  # raised after the failure delay
            self._drop(f"failed login: {exc.detail}")
            return None
        if session.authenticated:
            self._logged_in()
        return [struct.pack(">i", len(token)) + token]

    def _cork(self, pieces) -> bool:
        """Hold what is written in the socket until ``_uncork`` (TCP_CORK) when
        an answer mixes headers with file regions, so a header leaves in one
        segment with the records after it rather than alone: on loopback each
        segment wakes the reader, and its receive runs in the sender's time."""
        if self.sock is None or len(pieces) < 2 or not any(isinstance(p, FileRegion) for p in pieces):
            return False
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        except OSError:  # not TCP after all (a test's socket pair): never again
            self.sock = None
            return False
        return True

    def _uncork(self) -> None:
        if self.sock is not None and not self.transport.is_closing():
            try:
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)  # sends what it held
            except OSError:
                pass  # the connection is gone: its own error comes from the next write

    async def _write(self, pieces) -> None:
        corked = self._cork(pieces)
        try:
            for piece in pieces:
                if isinstance(piece, FileRegion) and self.tls is not None:
                    await self._write_through_tls(piece)
                elif isinstance(piece, FileRegion):
                    sent = self._sendfile_now(piece)
                    if sent < piece.size:
                        region = cast(IO[bytes], _RegionFile(piece.fd))  # what sendfile calls on a file, and no more
                        sent += await asyncio.get_running_loop().sendfile(
                            self.transport, region, piece.position + sent, piece.size - sent, fallback=False)
                        if sent < piece.size:
                            # the file ends before the region (cut since it was located): the size
                            # prefix already promised those bytes, so the stream cannot go on
                            raise ConnectionError(f"a segment file ended {piece.size - sent} bytes into an answer")
                        if self.paused or self.draining or self.holding:
                            self.transport.pause_reading()  # sendfile resumed reading behind our back
                    self.ctx.bytes_out += piece.size
                else:
                    self.transport.write(piece)
                    self.ctx.bytes_out += len(piece)
        finally:
            if corked:
                self._uncork()
        await self.writable.wait()  # a slow reader: the transport asked us to pause

    async def _write_through_tls(self, region: FileRegion) -> None:
        """Records for a TLS connection: read from the file and encrypted in
        turn, a chunk at a time, each read only once the client took what came
        before (a slow reader holds a chunk, not the region)."""
        done = 0
        while done < region.size:
            await self.writable.wait()
            if self.transport.is_closing():  # the client went: the rest has nowhere to go
                raise ConnectionError("the connection closed during an answer")
            chunk = os.pread(region.fd, min(region.size - done, _TLS_CHUNK_BYTES), region.position + done)
            if not chunk:  # cut since it was located: the size prefix promised those bytes
                raise ConnectionError(f"a segment file ended {region.size - done} bytes into an answer")
            self.transport.write(chunk)
            done += len(chunk)
            self.ctx.bytes_out += len(chunk)
