"""The intra-broker channel: a worker asks another to answer an owner call
(``owner_calls``) for a partition or group it owns, and awaits the result.

Every worker listens on an abstract-namespace Unix socket named after the
broker (the acceptor's pid) and its index; peers connect lazily and reconnect
after a restart.  A frame is a 4-byte length and one message of
``owner_calls``' codec: ``(call id, call)`` one way, ``(call id, result)`` back.
An ``Append``'s records do not travel in the frame: the sender puts them in
its region of the payload arena (``shared/payload_arena.py``) and sends the
reference (a large request's records it names where the connection received
them, in the arena too); the owner appends straight from there (a small
payload it copies out first), and the sender frees the slot when the answer
comes back (or the channel closes: the owner is gone).  A payload that finds
no slot goes inline, as before.
Only the declared call types decode; anything else is answered ``Failed``
when its call id can be read, logged and dropped otherwise, and never ends
the channel.  Calls are answered concurrently and may complete out of order,
matched by call id.  Both ends are buffered protocols: the owner starts a call
in the read callback that completed its frame and, when it finishes there (an
append), writes the answers of one read together; the caller's future is
resolved in the read callback its answer completed.

A call to a peer that is down (restarting) raises ``PeerUnavailable``; the
owner client (``owners.py``) turns it into the call's retriable error.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import logging
import re
import socket
import struct
from collections.abc import Callable
from typing import cast

from hpbroker.errors import ErrorCode
from hpbroker.protocol.exceptions import FrameTooLarge
from hpbroker.protocol.framing import FrameReader
from hpbroker.shared.payload_arena import ArenaReceiver, ArenaRef, ArenaSender, RefusedPayload
from hpbroker.workers import eager, owner_calls
from hpbroker.workers.owner_calls import Append, Batch, ChannelError, Failed, OwnerError
from hpbroker.workers.partition_moves import CALLER

log = logging.getLogger(__name__)

_LENGTH = struct.Struct(">I")
_CONNECT_TIMEOUT_S = 2.0
MAX_FRAME_BYTES = 256 << 20  # a larger length prefix is a broken stream
_SCRATCH_BYTES = 65536  # calls and answers arrive several to a read; an inline payload above this gets its own buffer
# a smaller payload is copied out of the arena: cheaper than writing it from where it lies,
# in two pieces and with the check after (about 2 µs against a copy of 16 KiB)
COPIED_BELOW = 16 << 10


class PeerUnavailable(Exception):
    pass


def socket_name(broker_tag: str, worker: int) -> str:
    return f"\0hpbroker-{broker_tag}-worker-{worker}"


def _client_name(broker_tag: str, worker: int, to: int) -> str:
    """The name a worker's channel to worker ``to`` is bound to: its owner learns who calls."""
    return f"{socket_name(broker_tag, worker)}-to-{to}"


_CALLER_NAME = re.compile(rb"-worker-(\d+)-to-\d+$")


def _caller(peername) -> int | None:
    """The calling worker's index, from the name its channel is bound to (None: unnamed)."""
    if isinstance(peername, str):
        peername = peername.encode()
    found = _CALLER_NAME.search(peername) if isinstance(peername, bytes) else None
    return int(found.group(1)) if found else None


def _frame(body: bytes) -> bytes:
    return _LENGTH.pack(len(body)) + body


def _by_reference(call, arena: ArenaSender, refs: list[ArenaRef], counted: Callable[[str, int], None]):
    """``call`` with its records moved into the arena where they fit; the slots taken go to ``refs``,
    the bytes sent each way to ``counted``."""
    if isinstance(call, Append):
        return _append_by_reference(call, arena, refs, counted)
    if isinstance(call, Batch) and any(isinstance(c, Append) for c in call.calls):
        return Batch([_append_by_reference(c, arena, refs, counted) if isinstance(c, Append) else c
                      for c in call.calls])
    return call


def _append_by_reference(call: Append, arena: ArenaSender, refs: list[ArenaRef],
                         counted: Callable[[str, int], None]) -> Append:
    size = len(call.records)
    if not size:
        return call
    ref = arena.reference(call.records)  # where the connection received it, when that is in the arena
    if ref is not None:
        counted("received", size)
    else:
        ref = arena.put(call.records)  # a copy in a slot
        if ref is None:
            counted("inline", size)
            return call
        counted("arena", size)
    refs.append(ref)
    return Append(call.topic, call.partition, b"", call.acks, ref, call.verified)


def _by_value(call, arena: ArenaReceiver):
    """``call`` with the records its references name as views of the arena
    (RefusedPayload when a slot no longer holds them): the owner appends
    straight from there, checking the slot again once written
    (``Partitions.append``); small ones copied out now instead."""
    if isinstance(call, Append):
        return _append_by_value(call, arena)
    if isinstance(call, Batch) and any(isinstance(c, Append) and c.payload is not None for c in call.calls):
        return Batch([_append_by_value(c, arena) if isinstance(c, Append) else c for c in call.calls])
    return call


def _append_by_value(call: Append, arena: ArenaReceiver) -> Append:
    ref = call.payload
    if ref is None:
        return call
    if ref.size < COPIED_BELOW:
        return Append(call.topic, call.partition, cast(bytes, arena.take(ref)), call.acks, verified=call.verified)
    # the reference stays: the owner's log checks it after writing what it named
    return Append(call.topic, call.partition, cast(bytes, arena.view(ref)), call.acks, ref, verified=call.verified)


class PeerServer:
    """Answers the other workers' calls with this worker's ``LocalOwner``: the
    same code, and the same failures, as this worker's own handlers get."""

    def __init__(self, broker_tag: str, index: int, local, arena: ArenaReceiver | None = None):
        self.name = socket_name(broker_tag, index)
        self.local = local  # owners.LocalOwner
        self.arena = arena
        self._server = None
        self.channels: set[_Serving] = set()  # the peers' open channels to this worker

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(self.name)
        self._server = await asyncio.get_running_loop().create_unix_server(lambda: _Serving(self), sock=sock)

    def close(self) -> None:
        """No new channels, and no more calls read from the open ones: the
        worker is stopping, and its logs close next (a peer's call then fails
        over to its retriable error)."""
        if self._server is not None:
            self._server.close()
        for channel in list(self.channels):
            channel._end()


class _Channel(asyncio.BufferedProtocol):
    """What both ends of a channel share: frames read with ``FrameReader``; a
    length beyond the limit ends the channel, after the frames that came whole
    before it (the owner may have acted on them), and so does the end of the
    stream (no half-open channel)."""

    frame_name = "a frame"

    def __init__(self):
        self._frames = FrameReader(MAX_FRAME_BYTES, _SCRATCH_BYTES)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._frames.buffer_updated(nbytes)
        except FrameTooLarge as exc:
            self._broken(exc)
            return
        self._handle(frames)
        if self._frames.failed is not None:
            self._broken(self._frames.failed)

    def _broken(self, exc: FrameTooLarge) -> None:
        log.error("peer channel closed: %s of %d bytes", self.frame_name, exc.size)
        self._end()

    def eof_received(self) -> bool:
        return False

    def _handle(self, frames: list[memoryview]) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError


class _Serving(_Channel):
    """One peer's channel to this worker.  A call is started in the read
    callback that completed its frame (``eager.py``): most finish there (an
    append to this worker's log), and their answers, all those of one read,
    go out in one write.  A call that waits is carried on by a task, which
    writes its answer when it has it."""

    def __init__(self, server: PeerServer):
        super().__init__()
        self.server = server
        self.local = server.local
        self.arena = server.arena
        self._transport: asyncio.Transport | None = None
        self._answers: list[bytes] | None = None  # while a read's calls run: their answers, written together
        self._tasks: set[asyncio.Task] = set()  # calls that wait, held until they end (even if the peer goes)
        self.caller = -2  # the calling worker (-2: it did not say): the owner counts who appends what

    def connection_made(self, transport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        caller = _caller(self._transport.get_extra_info("peername"))
        self.caller = -2 if caller is None else caller
        self.server.channels.add(self)

    def _handle(self, frames: list[memoryview]) -> None:
        self._answers = answers = []
        try:
            for frame in frames:
                try:
                    self._start(frame)
                except Exception:  # a bug: logged, and the calls after it are still answered
                    log.exception("a peer call could not be started")
        finally:
            self._answers = None
            if answers and self._transport is not None:
                self._transport.write(b"".join(answers))

    def _start(self, frame: memoryview) -> None:
        try:
            call_id, call = owner_calls.decode_call(frame)
            if self.arena is not None:
                call = _by_value(call, self.arena)  # a slot its sender no longer holds is refused now
        except ChannelError as exc:
            log.error("peer call refused: %s", exc)
            if exc.call_id is not None:
                self._reply(exc.call_id, Failed(ErrorCode.unknown_server_error, str(exc)))
            return
        except RefusedPayload as exc:  # its sender restarted since: nobody waits for this answer
            log.error("peer call refused: %s", exc)
            self._reply(call_id, Failed(ErrorCode.unknown_server_error, str(exc)))
            return
        context = contextvars.copy_context()
        context.run(CALLER.set, self.caller)
        _, task = eager.start(self._answer(call_id, call), context)
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _answer(self, call_id: int, call) -> None:
        try:
            result = await self.local.call(call)
        except OwnerError as exc:
            result = Failed(exc.error, str(exc))
        self._reply(call_id, result)

    def _reply(self, call_id: int, result) -> None:
        try:
            answer = _frame(owner_calls.encode(call_id, result))
        except Exception as exc:  # a bug: the caller still gets an answer, not a wait until the channel ends
            log.exception("the answer to a peer's call could not be encoded")
            answer = _frame(owner_calls.encode(call_id, Failed(ErrorCode.unknown_server_error, repr(exc))))
        if self._answers is not None:
            self._answers.append(answer)
        elif self._transport is not None and not self._transport.is_closing():
            self._transport.write(answer)

    def connection_lost(self, exc: Exception | None) -> None:
        # the peer went away, or this worker is stopping: calls under way still finish
        # (an append is not cut halfway), and their answers are dropped
        self._transport = None
        self.server.channels.discard(self)

    def _end(self) -> None:
        if self._transport is not None:
            self._transport.close()


class _Connection(_Channel):
    """This worker's channel to one peer: each answer resolves its call's
    future in the read callback that completed its frame."""

    frame_name = "an answer"

    def __init__(self, arena: ArenaSender | None):
        super().__init__()
        self.arena = arena
        self.pending: dict[int, asyncio.Future] = {}
        self.slots: dict[int, list[ArenaRef]] = {}  # call id -> the arena slots its owner may still read
        self.transport: asyncio.Transport | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def send(self, frame: bytes) -> None:
        if self.transport is None or self.closed:
            raise ConnectionError("peer channel closed")
        self.transport.write(frame)

    def _handle(self, frames: list[memoryview]) -> None:
        for frame in frames:
            try:
                call_id, result = owner_calls.decode_result(frame)
            except ChannelError as exc:
                log.error("a peer's answer refused: %s", exc)
                if exc.call_id is None:
                    continue
                call_id, result = exc.call_id, Failed(ErrorCode.unknown_server_error, str(exc))
            self.release(call_id)  # answered: the owner is done with its payloads
            future = self.pending.pop(call_id, None)
            if future is not None and not future.done():
                future.set_result(result)

    def _end(self) -> None:
        self.fail_all()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail_all()

    def release(self, call_id: int) -> None:
        refs = self.slots.pop(call_id, None)
        if refs is not None and self.arena is not None:
            for ref in refs:
                self.arena.release(ref)

    def fail_all(self) -> None:
        self.closed = True
        for future in self.pending.values():
            if not future.done():
                future.set_exception(PeerUnavailable("peer closed the channel"))
        self.pending.clear()
        for call_id in list(self.slots):  # the owner is gone: nothing reads them any more
            self.release(call_id)
        if self.transport is not None:
            self.transport.close()


class PeerClient:
    """Sends owner calls to the other workers."""

    def __init__(self, broker_tag: str, arena: ArenaSender | None = None,
                 counted: Callable[[str, int], None] = lambda path, size: None, index: int | None = None):
        self.broker_tag = broker_tag
        self.index = index  # this worker's, named by its channels (None: they are unnamed)
        self.arena = arena
        self.counted = counted  # (path, bytes) of every payload sent: "arena" or "inline"
        self._connections: dict[int, _Connection] = {}
        self._connecting: dict[int, asyncio.Future] = {}
        self._ids = itertools.count()

    async def _connection(self, worker: int) -> _Connection:
        conn = self._connections.get(worker)
        if conn is not None and not conn.closed:
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
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            if self.index is not None:
                try:
                    sock.bind(_client_name(self.broker_tag, self.index, worker))
                except OSError:  # still held by a channel of ours closing now: unnamed, as before
                    pass
            await asyncio.wait_for(loop.sock_connect(sock, socket_name(self.broker_tag, worker)), _CONNECT_TIMEOUT_S)
            _, conn = await loop.create_unix_connection(lambda: _Connection(self.arena), sock=sock)
        except (OSError, asyncio.TimeoutError) as exc:
            sock.close()
            raise PeerUnavailable(f"worker {worker} is not reachable: {exc}") from None
        self._connections[worker] = conn
        return conn

    async def call(self, worker: int, call):
        """``call``'s result (or ``Failed``) from worker ``worker``; PeerUnavailable
        when it cannot be reached or goes away before answering."""
        conn = self._connections.get(worker)
        if conn is None or conn.closed:
            conn = await self._connection(worker)
        call_id = next(self._ids)
        future = asyncio.get_running_loop().create_future()
        conn.pending[call_id] = future
        refs: list[ArenaRef] = []
        if self.arena is not None:
            call = _by_reference(call, self.arena, refs, self.counted)
        if refs:
            # freed when the answer comes (or the channel closes), not when this
            # coroutine ends: a cancelled caller must not free what the owner still reads
            conn.slots[call_id] = refs
        try:
            conn.send(_frame(owner_calls.encode(call_id, call)))
        except (ConnectionError, RuntimeError) as exc:
            conn.pending.pop(call_id, None)
            conn.release(call_id)
            raise PeerUnavailable(str(exc)) from None
        return await future

    def close(self) -> None:
        for conn in self._connections.values():
            conn.fail_all()
        self._connections.clear()
