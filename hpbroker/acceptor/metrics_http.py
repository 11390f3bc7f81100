"""``/metrics`` over HTTP from the acceptor's own loop (no thread, so forking
workers stays safe): a request is read without blocking, the answer is the
samples of every process (``hpbroker.server.metrics.render``)."""

import logging
import socket

log = logging.getLogger(__name__)

_MAX_REQUEST = 8192


class MetricsEndpoint:
    def __init__(self, host: str, port: int):
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((host, port))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.address = self.sock.getsockname()
        self._pending: dict[socket.socket, bytearray] = {}

    def accept(self) -> list[socket.socket]:
        """New client sockets, for the caller's selector."""
        accepted = []
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return accepted
            conn.setblocking(False)
            self._pending[conn] = bytearray()
            accepted.append(conn)

    def readable(self, conn: socket.socket) -> bool:
        """Read what arrived; True once the connection is done (answered or
        dropped): the caller then unregisters and closes it."""
        buf = self._pending.get(conn)
        try:
            chunk = conn.recv(4096)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            chunk = b""
        if chunk and buf is not None:
            buf += chunk
            if b"\r\n\r\n" not in buf and len(buf) < _MAX_REQUEST:
                return False
            self._answer(conn, bytes(buf))
        self._pending.pop(conn, None)
        return True

    def _answer(self, conn: socket.socket, request: bytes) -> None:
        from hpbroker.server import metrics

        line = request.split(b"\r\n", 1)[0].split()
        if len(line) >= 2 and line[0] == b"GET" and line[1].split(b"?")[0] in (b"/metrics", b"/"):
            try:
                body, status = metrics.render(), b"200 OK"
                kind = b"text/plain; version=0.0.4; charset=utf-8"
            except Exception:  # a scrape must never take the acceptor down: this one fails alone
                log.exception("rendering /metrics failed")
                body, status = b"metrics could not be read; see the broker's log\n", b"500 Internal Server Error"
                kind = b"text/plain"
        else:
            body, status, kind = b"not found: try /metrics\n", b"404 Not Found", b"text/plain"
        head = (b"HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (status, kind, len(body)))
        conn.settimeout(2.0)  # a scraper that does not read does not get to stall the acceptor long
        try:
            conn.sendall(head + body)
        except OSError as exc:
            log.debug("metrics scrape from a client that went away: %s", exc)

    def close(self) -> None:
        for conn in self._pending:
            conn.close()
        self._pending.clear()
        self.sock.close()
