"""Connections from this worker to the other brokers of a cluster, for the
requests a broker itself sends (a transaction's markers to a partition's
leader, a produce's verification with a transaction's coordinator): one
connection per broker, opened on first use at the address the cluster image
gives (one per lane), dropped when it fails or the broker moves."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from hpbroker.replication.client import ClientConnection

log = logging.getLogger(__name__)
CONNECT_TIMEOUT_S = 5.0


class BrokerUnreachable(Exception):
    """No answer from the broker: not registered, not reachable, or it failed the request."""


class BrokerClients:
    def __init__(self, broker_id: int, address_of: Callable[[int], tuple[str, int] | None]):
        self.client_id = f"broker-{broker_id}"
        self._address_of = address_of  # broker id -> (host, port) as the image has it, or None
        # (broker id, lane) -> (the address it was opened to, the connection)
        self._connections: dict[tuple[int, str], tuple[tuple[str, int], ClientConnection]] = {}
        self._opening: dict[tuple[int, str], asyncio.Lock] = {}

    async def send(self, broker_id: int, request, timeout: float = 30.0, lane: str = "default"):
        """The broker's response to the kio ``request`` (BrokerUnreachable when none
        comes).  A broker answers a connection's requests in order, so requests
        that must not queue behind each other go in lanes of their own."""
        key = (broker_id, lane)
        connection = await self._connection(key)
        try:
            return await connection.send(request, timeout)
        except (ConnectionError, OSError, asyncio.TimeoutError) as exc:
            self._drop(key)
            raise BrokerUnreachable(f"broker {broker_id}: {exc or type(exc).__name__}") from None

    async def _connection(self, key: tuple[int, str]) -> ClientConnection:
        broker_id = key[0]
        address = self._address_of(broker_id)
        if address is None:
            raise BrokerUnreachable(f"broker {broker_id} is not registered")
        lock = self._opening.setdefault(key, asyncio.Lock())
        async with lock:  # one connection per broker and lane, however many ask at once
            known = self._connections.get(key)
            if known is not None and known[0] == address and not known[1].closed:
                return known[1]
            self._drop(key)
            try:
                connection = await ClientConnection.open(*address, client_id=self.client_id,
                                                         timeout=CONNECT_TIMEOUT_S)
            except (OSError, asyncio.TimeoutError) as exc:
                raise BrokerUnreachable(f"broker {broker_id} at {address[0]}:{address[1]}: "
                                        f"{exc or type(exc).__name__}") from None
            self._connections[key] = (address, connection)
            return connection

    def _drop(self, key: tuple[int, str]) -> None:
        known = self._connections.pop(key, None)
        if known is not None:
            known[1].close()

    def close(self) -> None:
        for key in list(self._connections):
            self._drop(key)
