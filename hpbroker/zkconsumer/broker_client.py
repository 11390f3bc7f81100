"""Blocking Kafka-protocol connections for the ZooKeeper-coordinated consumer,
which finds brokers in ZooKeeper rather than through Metadata.

Requests on one connection may be written back to back and their answers read
in order (Kafka answers a connection's requests in the order they came), which
is how one poll waits on several leaders at once.
"""

from __future__ import annotations

import itertools
import socket
import struct

from hpbroker.protocol.client_codec import MAX_RESPONSE_BYTES, decode_response, encode_request

_int32 = struct.Struct(">i")


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout_s: float):
        self.address = (host, port)
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._sock = socket.create_connection(self.address, timeout=timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)
        self._pending: list[tuple[int, int, int]] = []  # (correlation id, api key, version), oldest first

    @property
    def closed(self) -> bool:
        return self._sock is None

    def send(self, request) -> None:
        """Write ``request``; its answer is read by ``receive`` in order."""
        if self._sock is None:
            raise ConnectionError(f"connection to {self._where()} is closed")
        correlation_id = next(self._ids) & 0x7FFFFFFF
        try:
            self._sock.sendall(encode_request(request, correlation_id, self.client_id))
        except OSError as exc:
            self.close()
            raise ConnectionError(f"sending to {self._where()} failed: {exc}") from None
        self._pending.append((correlation_id, int(request.__api_key__), int(request.__version__)))

    def receive(self, timeout_s: float | None = None):
        """The answer to the oldest request sent; ConnectionError (and the
        connection closed) when it does not come or cannot be read."""
        if self._sock is None or not self._pending:
            raise ConnectionError(f"nothing is awaited from {self._where()}")
        correlation_id, api_key, version = self._pending.pop(0)
        try:
            self._sock.settimeout(timeout_s if timeout_s is not None else self.timeout_s)
            size = _int32.unpack(self._read(4))[0]
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise ConnectionError(f"response size {size} is not plausible")
            got_id, response = decode_response(api_key, version, self._read(size))
        except ConnectionError:
            self.close()
            raise
        except Exception as exc:  # a lost or undecodable stream: nothing later on it can be matched
            self.close()
            raise ConnectionError(f"reading from {self._where()} failed: {exc!r}") from None
        if got_id != correlation_id:
            self.close()
            raise ConnectionError(f"{self._where()} answered {got_id} where {correlation_id} was due")
        return response

    def request(self, request, timeout_s: float | None = None):
        self.send(request)
        return self.receive(timeout_s)

    def _read(self, n: int) -> bytes:
        sock = self._sock
        assert sock is not None  # receive() checked it
        chunks, left = [], n
        while left:
            chunk = sock.recv(min(left, 1 << 20))
            if not chunk:
                raise ConnectionError(f"{self._where()} closed the connection")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def _where(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._pending.clear()


class BrokerConnections:
    """One connection per broker address, made on first use and again after a failure."""

    def __init__(self, client_id: str, timeout_s: float):
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._open: dict[tuple[str, int], BrokerConnection] = {}

    def get(self, host: str, port: int) -> BrokerConnection:
        connection = self._open.get((host, port))
        if connection is None or connection.closed:
            try:
                connection = BrokerConnection(host, port, self.client_id, self.timeout_s)
            except OSError as exc:
                raise ConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
            self._open[(host, port)] = connection
        return connection

    def close(self) -> None:
        for connection in self._open.values():
            connection.close()
        self._open.clear()
