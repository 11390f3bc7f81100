"""What TLS costs the broker, next to PLAINTEXT, in one run: per connection,
per request and per byte, each way.

    .venv/bin/python bench/tls_cost.py [--connections N] [--mib M] [--markdown FILE]

Two hpbrokers (two workers each) started here: one with an SSL listener (an
ECDSA P-256 certificate of a CA made for the run, TLS 1.3), one with a
PLAINTEXT one. Broker CPU is utime+stime of the acceptor and its workers
from /proc, read at each phase's edges, less the broker's idle CPU over the
same time. Phases, on each broker:

* connection: N connections one after the other from one Python thread:
  connect (and the TLS handshake), ApiVersions v0, Metadata v0, close;
* request: 5N Metadata v0 requests on one connection, one outstanding;
* produce: M MiB of 1 KiB records to one partition with librdkafka's C
  ``rdkafka_performance`` (acks=1, linger 5 ms), as ``request_cost.py``'s
  per-byte phase; broker CPU seconds per GiB and MiB/s;
* fetch: the same records read back by ``rdkafka_performance -C``: on
  PLAINTEXT large answers leave the page cache by sendfile, on TLS each is
  read and encrypted by the worker.

Each per-byte phase starts after ``memory_probe.warm`` (see bench/README
in RESULTS.md: on this VM freshly freed memory costs a write ten times
more), so both brokers meet the same memory.
"""

import argparse
import socket
import ssl
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import memory_probe, tools  # noqa: E402
from bench.e2e import render  # noqa: E402
from bench.rdperf import Fleet  # noqa: E402
from harness.broker import Broker, recv_exact  # noqa: E402
from harness.tls import Authority, broker_settings  # noqa: E402

IDLE_S = 3.0
GiB, MiB = 1 << 30, 1 << 20
TOPIC = "tls-bytes"


def _request(s, api_key: int, version: int, body: bytes) -> bytes:
    frame = struct.pack(">hhih", api_key, version, 1, 5) + b"bench" + body
    s.sendall(struct.pack(">i", len(frame)) + frame)
    size = struct.unpack(">i", recv_exact(s, 4))[0]
    return recv_exact(s, size)[4:]


def _metadata(s) -> None:
    _request(s, 3, 0, struct.pack(">i", 0))


def _idle(broker: Broker) -> float:
    start = broker.cpu_seconds()
    time.sleep(IDLE_S)
    return (broker.cpu_seconds() - start) / IDLE_S


def _metered(broker: Broker, idle_per_s: float, work) -> tuple[float, float]:
    """(broker CPU seconds less idle, wall seconds) of ``work()``."""
    start_cpu, start = broker.cpu_seconds(), time.monotonic()
    work()
    used, took = broker.cpu_seconds() - start_cpu, time.monotonic() - start
    return max(used - idle_per_s * took, 0.0), took


def _open(broker: Broker, context: ssl.SSLContext | None):
    s = socket.create_connection((broker.host, broker.port))
    return s if context is None else context.wrap_socket(s, server_hostname=broker.host)


def _rdperf(perf: Path, work: Path, name: str, argv: list[str]) -> None:
    fleet = Fleet(perf, work / name, [argv], stats_ms=None).start()
    codes = fleet.wait(900)
    if codes != [0]:
        raise RuntimeError(f"rdkafka_performance {name} exited {codes}: "
                           f"{fleet.outs[0].with_suffix('.err').read_text()[-500:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--mib", type=int, default=512, help="MiB produced, then fetched, on each broker")
    parser.add_argument("--markdown", metavar="FILE")
    args = parser.parse_args()
    n, records = args.connections, args.mib * MiB // 1024
    perf = tools.rdkafka_performance()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        authority = Authority(root / "pki")
        certificate = authority.issue("broker", "broker", hosts=("127.0.0.1",))
        context = authority.client_context()
        tls = Broker(root / "tls", overrides={**broker_settings(authority, certificate), "num.workers": "2"},
                     tls=context).start()
        plaintext = Broker(root / "plain", overrides={"num.workers": "2"}).start()
        rows: dict[str, dict[str, float]] = {}
        try:
            for name, broker, ctx in (("PLAINTEXT", plaintext, None), ("SSL", tls, context)):
                idle = _idle(broker)
                row = rows[name] = {}

                def connection(b=broker, c=ctx) -> None:
                    with _open(b, c) as s:
                        _request(s, 18, 0, b"")
                        _metadata(s)
                row["connection"] = _metered(broker, idle, lambda: [connection() for _ in range(n)])[0] / n * 1e6
                with _open(broker, ctx) as s:
                    row["request"] = _metered(broker, idle, lambda s=s: [_metadata(s) for _ in range(n * 5)])[0] \
                        / (n * 5) * 1e6
                client = [] if ctx is None else ["-X", "security.protocol=ssl",
                                                 "-X", f"ssl.ca.location={authority.ca_file}"]
                memory_probe.warm(str(root), args.mib * 3)
                cpu, wall = _metered(broker, idle, lambda b=broker, cl=client: _rdperf(perf, root, f"{name}-p", [
                    "-P", "-t", TOPIC, "-p", "0", "-s", "1024", "-c", str(records), "-a", "1", "-b", b.bootstrap,
                    "-X", "linger.ms=5", *cl]))
                row["produce_cpu"], row["produce_mibs"] = cpu / (records * 1024 / GiB), args.mib / wall
                memory_probe.warm(str(root), args.mib * 3)
                cpu, wall = _metered(broker, idle, lambda b=broker, cl=client: _rdperf(perf, root, f"{name}-c", [
                    "-C", "-t", TOPIC, "-p", "0", "-o", "beginning", "-c", str(records), "-b", b.bootstrap, *cl]))
                row["fetch_cpu"], row["fetch_mibs"] = cpu / (records * 1024 / GiB), args.mib / wall
        finally:
            tls.stop()
            plaintext.stop()
    plain, secure = rows["PLAINTEXT"], rows["SSL"]
    table = []
    for key, label, digits in (("connection", f"connection ({n}), broker CPU µs each", 0),
                               ("request", f"Metadata v0 ({n * 5}), broker CPU µs each", 0),
                               ("produce_cpu", f"produce {args.mib} MiB, broker CPU s per GiB", 2),
                               ("produce_mibs", "produce, MiB/s", 0),
                               ("fetch_cpu", f"fetch {args.mib} MiB, broker CPU s per GiB", 2),
                               ("fetch_mibs", "fetch, MiB/s", 0)):
        ratio = secure[key] / plain[key] if plain[key] else float("nan")
        table.append([label, f"{plain[key]:.{digits}f}", f"{secure[key]:.{digits}f}", f"{ratio:.2f}"])
    text, markdown = render(table, ["phase", "PLAINTEXT", "SSL", "SSL / PLAINTEXT"])
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(markdown + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
