"""What a short connection costs the broker's processes, the acceptor's part
apart from the workers': connect, ApiVersions v0, close, N times from one
Python thread, on a broker with no connection quota and on one whose quotas
are all set (none reached), in one run.

    .venv/bin/python bench/connection_cost.py [--connections N] [--rounds R]

CPU is utime+stime from /proc of the acceptor and of its two workers, read
before and after each round's connections (the rounds take turns between
the two brokers).  Run it in two checkouts to compare trees.
"""

import argparse
import socket
import struct
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.broker import Broker, children, cpu_seconds  # noqa: E402

API_VERSIONS = struct.pack(">hhih", 18, 0, 7, 1) + b"q"
QUOTAS = {"max.connections": "100000", "max.connections.per.ip": "100000",
          "max.connections.per.ip.overrides": "127.0.0.2:5", "max.connection.creation.rate": "1000000"}


def one_connection(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(struct.pack(">i", len(API_VERSIONS)) + API_VERSIONS)
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        s.recv(size, socket.MSG_WAITALL)


def cost(b: Broker, n: int) -> tuple[float, float]:
    """(acceptor, workers) CPU µs per connection over ``n`` connections."""
    workers = sorted(children(b.pid))
    acceptor, busy = cpu_seconds(b.pid), sum(cpu_seconds(w) for w in workers)
    for _ in range(n):
        one_connection(b.port)
    return (1e6 * (cpu_seconds(b.pid) - acceptor) / n,
            1e6 * (sum(cpu_seconds(w) for w in workers) - busy) / n)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="connection-cost-"))
    brokers = {"no quotas": Broker(root / "plain", overrides={}, num_workers=2),
               "quotas set": Broker(root / "quotas", overrides=QUOTAS, num_workers=2)}
    try:
        for b in brokers.values():
            b.start()
            for _ in range(200):  # warm: imports, caches
                one_connection(b.port)
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in brokers}
        for _ in range(args.rounds):
            for name, b in brokers.items():
                found[name].append(cost(b, args.connections))
        print(f"{args.connections} connections a round, {args.rounds} rounds; CPU µs per connection")
        for name, rounds in found.items():
            acceptor = " / ".join(f"{a:.0f}" for a, _ in rounds)
            workers = " / ".join(f"{w:.0f}" for _, w in rounds)
            print(f"{name:10}  acceptor {acceptor}   workers {workers}")
    finally:
        for b in brokers.values():
            if b.proc is not None:
                b.stop()


if __name__ == "__main__":
    main()
