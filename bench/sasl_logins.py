"""What a SASL login costs the broker, next to what a connection without one
and a request cost it, in one run.

    .venv/bin/python bench/sasl_logins.py [--connections N] [--markdown FILE]

One hpbroker (two workers) with a SASL_PLAINTEXT listener and one with a
PLAINTEXT listener, started here. Broker CPU is utime+stime of the acceptor
and its workers from /proc, read at each phase's edges, less the broker's
idle CPU over the same time. Phases, each N connections opened one after
the other from one client thread (Python, raw sockets):

* plaintext: connect, ApiVersions v0, Metadata v0, close (the PLAINTEXT broker);
* PLAIN / SCRAM-SHA-256 / SCRAM-SHA-512: connect, ApiVersions v0,
  SaslHandshake v1, the mechanism's SaslAuthenticate requests, Metadata v0,
  close. SCRAM's PBKDF2 (4096 iterations) is the client's work: the broker
  checks the proof with two HMACs and a hash, and reads the credential from
  the log dir's file at each login;
* Metadata on one logged-in connection, and on a PLAINTEXT one: N requests,
  one outstanding, for the cost of a request once logged in.

The login's own cost is its row less the plaintext row; the ratio column
says how many Metadata requests on a logged-in connection cost as much.
"""

import argparse
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from harness.broker import Broker, plain_login  # noqa: E402
from harness.sasl import ADMIN, add_scram_user, settings  # noqa: E402
from hpbroker.security import scram  # noqa: E402

SASL = {**settings(), "num.workers": "2"}
IDLE_S = 3.0


def _request(s: socket.socket, api_key: int, version: int, body: bytes) -> bytes:
    frame = struct.pack(">hhih", api_key, version, 1, 5) + b"bench" + body
    s.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
    answer = s.recv(size, socket.MSG_WAITALL)
    if len(answer) != size:
        raise ConnectionError("the broker closed the connection")
    return answer[4:]


def _metadata(s: socket.socket) -> None:
    _request(s, 3, 0, struct.pack(">i", 0))


def _scram_login(s: socket.socket, mechanism: str, user: str, password: str) -> None:
    name = mechanism.encode()
    if struct.unpack_from(">h", _request(s, 17, 1, struct.pack(">h", len(name)) + name))[0]:
        raise ConnectionError("handshake refused")
    client = scram.ScramClient(mechanism, user, password)  # its PBKDF2 costs the client, not the broker

    def token(data: bytes) -> bytes:
        answer = _request(s, 36, 0, struct.pack(">i", len(data)) + data)
        if struct.unpack_from(">h", answer)[0]:
            raise ConnectionError("login refused")
        message_length = struct.unpack_from(">h", answer, 2)[0]
        offset = 4 + max(message_length, 0)
        size = struct.unpack_from(">i", answer, offset)[0]
        return answer[offset + 4:offset + 4 + size]
    client.check(token(client.final(token(client.first()))))


def _phase(broker: Broker, idle_per_s: float, count: int, one) -> float:
    """Broker CPU µs per ``one()`` call, less idle."""
    start_cpu, start = broker.cpu_seconds(), time.monotonic()
    for _ in range(count):
        one()
    used, took = broker.cpu_seconds() - start_cpu, time.monotonic() - start
    return max(used - idle_per_s * took, 0.0) / count * 1e6


def _idle(broker: Broker) -> float:
    start = broker.cpu_seconds()
    time.sleep(IDLE_S)
    return (broker.cpu_seconds() - start) / IDLE_S


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--markdown", metavar="FILE")
    args = parser.parse_args()
    n = args.connections
    with tempfile.TemporaryDirectory() as tmp:
        sasl = Broker(Path(tmp) / "sasl", overrides=SASL, login=ADMIN).start()
        plaintext = Broker(Path(tmp) / "plain", overrides={"num.workers": "2"}).start()
        try:
            add_scram_user(sasl.bootstrap, "bench", {"SCRAM-SHA-256": (b"bench-secret", 4096),
                                                     "SCRAM-SHA-512": (b"bench-secret", 4096)})
            idle = {sasl: _idle(sasl), plaintext: _idle(plaintext)}
            rows = []

            def connection(broker: Broker, login) -> None:
                with socket.create_connection((broker.host, broker.port)) as s:
                    _request(s, 18, 0, b"")
                    login(s)
                    _metadata(s)
            rows.append(("connection, plaintext",
                         _phase(plaintext, idle[plaintext], n, lambda: connection(plaintext, lambda s: None))))
            rows.append(("connection + PLAIN login",
                         _phase(sasl, idle[sasl], n, lambda: connection(sasl, lambda s: plain_login(s, *ADMIN)))))
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                rows.append((f"connection + {mechanism} login", _phase(sasl, idle[sasl], n, lambda m=mechanism: (
                    connection(sasl, lambda s: _scram_login(s, m, "bench", "bench-secret"))))))
            with socket.create_connection((sasl.host, sasl.port)) as s:
                _request(s, 18, 0, b"")
                plain_login(s, *ADMIN)
                logged_in = _phase(sasl, idle[sasl], n * 5, lambda: _metadata(s))
            with socket.create_connection((plaintext.host, plaintext.port)) as s:
                plain_request = _phase(plaintext, idle[plaintext], n * 5, lambda: _metadata(s))
        finally:
            sasl.stop()
            plaintext.stop()
    base = rows[0][1]
    lines = [f"| phase ({n} connections; Metadata: {n * 5} requests) | broker CPU µs each | login's own, "
             "in Metadata requests |", "| --- | --- | --- |"]
    for name, cost in rows:
        extra = "" if name.endswith("plaintext") else f"{(cost - base) / logged_in:.1f}"
        lines.append(f"| {name} | {cost:.0f} | {extra} |")
    lines.append(f"| Metadata v0, logged-in connection | {logged_in:.0f} | |")
    lines.append(f"| Metadata v0, plaintext connection | {plain_request:.0f} | |")
    text = "\n".join(lines)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
