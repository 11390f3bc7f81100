"""Kafka's connection quotas (``server/connection_limits.py`` reads them),
kept by the acceptor: it sees every connection open, and the workers tell it
of every close.

* ``max.connections`` (and ``listener.name.<l>.max.connections``): at the
  limit, the listener stops accepting and new clients wait in its backlog
  until a connection closes.  With other listeners beside it, the brokers'
  own listener is held only by its own listener limit, so replication never
  waits behind clients.
* ``max.connections.per.ip`` and ``max.connections.per.ip.overrides``
  (``host:count,...``): a connection beyond its address's limit is accepted
  and closed at once, as Kafka does.
* ``max.connection.creation.rate`` (and per listener): connections accepted
  per second; past it the listener waits, so a storm of new connections
  (each a TLS handshake, a login) is spread out instead of refused.  With
  other listeners beside it, the brokers' listener is held only by its own
  listener rate.

Each limit's default is Kafka's, 2147483647: none.
"""

from __future__ import annotations

import math
from collections import Counter

from hpbroker.server.connection_limits import UNLIMITED, ConnectionLimits


class _Bucket:
    """Up to ``rate`` connections a second, a second's worth at once."""

    def __init__(self, rate: int, now: float):
        self.rate = rate
        self.tokens = float(rate)
        self.at = now

    def _refill(self, now: float) -> None:
        self.tokens = min(float(self.rate), self.tokens + (now - self.at) * self.rate)
        self.at = now

    def wait(self, now: float) -> float:
        """Seconds until a connection may be accepted (0: now)."""
        self._refill(now)
        return 0.0 if self.tokens >= 1 else (1 - self.tokens) / self.rate if self.rate else math.inf

    def take(self, now: float) -> None:
        self._refill(now)
        self.tokens -= 1


class ConnectionQuotas:
    def __init__(self, settings: ConnectionLimits, now: float):
        self.per_ip: Counter[str] = Counter()
        self.per_listener: Counter[str] = Counter()
        self.total = 0
        self.configure(settings, now)

    def configure(self, settings: ConnectionLimits, now: float) -> None:
        """New limits (a reload); the counts carry on."""
        self.settings = settings
        limited = settings.creation_rate < UNLIMITED
        self.broker_rate = _Bucket(settings.creation_rate, now) if limited else None
        self.listener_rates = {name: _Bucket(rate, now) for name, rate in settings.listener_rate.items()
                               if rate < UNLIMITED}
        # the common case, no limit at all, answers without looking
        self.any_listener_limit = (settings.max_connections < UNLIMITED or self.broker_rate is not None
                                   or bool(self.listener_rates) or bool(settings.listener_max))
        self.any_ip_limit = settings.per_ip < UNLIMITED or bool(settings.per_ip_overrides)

    # --- counting --------------------------------------------------------------------
    def opened(self, ip: str, listener: str) -> None:
        self.per_ip[ip] += 1
        self.per_listener[listener] += 1
        self.total += 1

    def closed(self, ip: str, listener: str) -> None:
        if self.per_listener[listener] > 0:
            self.total -= 1
        for counter, key in ((self.per_ip, ip), (self.per_listener, listener)):
            if counter[key] <= 1:
                counter.pop(key, None)
            else:
                counter[key] -= 1

    # --- deciding --------------------------------------------------------------------
    def ip_limit(self, ip: str) -> int:
        return self.settings.per_ip_overrides.get(ip, self.settings.per_ip)

    def ip_full(self, ip: str) -> bool:
        """A new connection from ``ip`` would pass its limit."""
        return self.any_ip_limit and self.per_ip[ip] >= self.ip_limit(ip)

    def accept_wait(self, listener: str, now: float) -> float:
        """Seconds until ``listener`` may accept (0: now; inf: until a connection closes)."""
        if not self.any_listener_limit:
            return 0.0
        s = self.settings
        if self.per_listener[listener] >= s.listener_max.get(listener, UNLIMITED):
            return math.inf
        clients = listener != s.protected
        if clients and self.total >= s.max_connections:
            return math.inf
        waits = [0.0]
        bucket = self.listener_rates.get(listener)
        if bucket is not None:
            waits.append(bucket.wait(now))
        if clients and self.broker_rate is not None:
            waits.append(self.broker_rate.wait(now))
        return max(waits)

    def accepted(self, listener: str, now: float) -> None:
        """A connection was accepted on ``listener``: it counts against the rates."""
        bucket = self.listener_rates.get(listener)
        if bucket is not None:
            bucket.take(now)
        if listener != self.settings.protected and self.broker_rate is not None:
            self.broker_rate.take(now)
