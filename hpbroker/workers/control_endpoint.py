"""The worker's end of its control channel to the acceptor (the messages and
their bytes are ``hpbroker.server.control_channel``'s).

Outgoing messages leave in order and are never dropped: when the channel is
full they wait in an outbox until it is writable, and a message may carry a
``then`` that runs once it has left (a connection is adopted only after its
"took" has, so the acceptor never hands on a socket this worker serves).
Incoming messages are dispatched to the worker's callbacks; a packet that is
no message is logged and ignored, never fatal; the acceptor going away stops
the worker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import cast

from hpbroker.server import control_channel
from hpbroker.server.control_channel import ControlMessageError, Kind, Peer

log = logging.getLogger(__name__)


class ControlEndpoint:
    def __init__(self, sock: socket.socket, *, on_connection: Callable[[list[int], int, Peer], None],
                 on_drain: Callable[[], object], on_reload: Callable[[dict], None], on_stop: Callable[[], None]):
        self.sock = sock
        # (descriptors, recvmsg flags, its client address and listener): a connection handed over
        self.on_connection = on_connection
        self.on_drain = on_drain
        self.on_reload = on_reload
        self.on_stop = on_stop  # also when the acceptor is gone
        self._outbox: deque = deque()  # (message, then) not yet sent
        self._waiting_writable = False

    def start(self) -> None:
        self.sock.setblocking(False)
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._on_readable)

    def stop_reading(self) -> None:
        asyncio.get_running_loop().remove_reader(self.sock.fileno())

    # --- out -------------------------------------------------------------------------------
    def send(self, kind: Kind, payload=None, then: Callable[[], None] | None = None, fd: int | None = None) -> None:
        """Queue a message; ``fd`` (a descriptor of ours) goes along as SCM_RIGHTS
        and is closed here once the message has left (or could not)."""
        self._outbox.append((control_channel.encode(kind, payload), fd, then))
        if len(self._outbox) == 1:
            self._flush()

    def _flush(self) -> None:
        while self._outbox:
            message, fd, then = self._outbox[0]
            try:
                if fd is None:
                    self.sock.send(message)
                else:
                    socket.send_fds(self.sock, [message], [fd])
            except BlockingIOError:
                if not self._waiting_writable:
                    asyncio.get_running_loop().add_writer(self.sock.fileno(), self._flush)
                    self._waiting_writable = True
                return
            except OSError as exc:
                log.warning("control channel: %s", exc)  # the acceptor is gone: reading stops us
                for _message, left, _then in self._outbox:
                    if left is not None:
                        os.close(left)
                self._outbox.clear()
                return
            self._outbox.popleft()
            if fd is not None:
                os.close(fd)  # the message in flight holds the socket now
            if then is not None:
                then()
        if self._waiting_writable:
            asyncio.get_running_loop().remove_writer(self.sock.fileno())
            self._waiting_writable = False

    # --- in ----------------------------------------------------------------------------------
    def _on_readable(self) -> None:
        while True:
            try:
                data, fds, flags, _addr = socket.recv_fds(self.sock, control_channel.MAX_MESSAGE, 8)
            except BlockingIOError:
                return
            except OSError as exc:
                log.error("control channel failed (%s); stopping", exc)
                self.on_stop()
                return
            if not data and not fds:
                log.error("the acceptor went away; stopping")
                self.on_stop()
                return
            self._dispatch(data, fds, flags)

    def _dispatch(self, data: bytes, fds: list[int], flags: int) -> None:
        try:
            message = control_channel.decode(data)
        except ControlMessageError as exc:
            log.warning("ignoring a message from the acceptor: %s", exc)
            message = None
        if message is not None and message.kind is Kind.CONN:
            self.on_connection(fds, flags, cast(Peer, message.payload))
            return
        for fd in fds:
            os.close(fd)  # only a connection comes with a descriptor
        if message is None:
            return
        if message.kind is Kind.STOP:
            self.on_stop()
        elif message.kind is Kind.DRAIN:
            self.on_drain()
        elif message.kind is Kind.RELOAD:
            self.on_reload(cast(dict, message.payload))  # control_channel.decode checked it
        else:
            log.warning("ignoring a %s message from the acceptor: it is a worker's to send", message.kind.value)
