"""Bad bytes on one connection close that connection; everyone else carries on.
Bad settings or a busy data dir stop ``hpbroker serve`` with one line, no traceback."""

import socket
import struct
import subprocess
import sys

import confluent_kafka as ck
import pytest

from tests.integration.broker import REPO, free_port, metadata_ping
from tests.integration.clients import ck_consume, topic_name


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _header(api_key: int, version: int, correlation: int = 1, client: bytes = b"raw") -> bytes:
    return struct.pack(">hhih", api_key, version, correlation, len(client)) + client


BAD = {
    "garbage": b"\x00\x00\x00\x10" + b"garbage!garbage!",
    "negative-length": b"\xff\xff\xff\xf0" + b"x" * 16,
    # > socket.request.max.bytes (100 MiB): refused on the length alone
    "oversized-frame": struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 64,
    "unknown-api-key": _frame(_header(9999, 0) + b"\x00\x00\x00\x00"),
    # Metadata v1 whose client id claims more bytes than the frame holds
    "truncated-header": _frame(struct.pack(">hhih", 3, 1, 1, 200) + b"abc"),
    # Produce v3 with a body cut off in the middle of its topic array
    "truncated-body": _frame(_header(0, 3) + b"\xff\xff" + struct.pack(">hi", 1, 1000) + struct.pack(">i", 5)),
}


def _closed_by_peer(s: socket.socket) -> bool:
    """True once the broker closed the connection without answering."""
    s.settimeout(10)
    try:
        data = s.recv(4096)
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False  # left open, silently waiting
    assert data == b"", f"expected the connection to be closed, got an answer {data[:40]!r}"
    return True


@pytest.fixture(scope="module")
def healthy(broker):
    """A client connected before the abuse, and kept using it throughout."""
    topic = topic_name("healthy")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    sent = []

    def produce_one():
        value = b"ok-%d" % len(sent)
        p.produce(topic, value=value, partition=0)
        assert p.flush(15) == 0
        sent.append(value)
        got = ck_consume(broker.bootstrap, topic, [0], len(sent), timeout=15)
        assert [r.value for r in got] == sent

    produce_one()
    return produce_one


@pytest.mark.parametrize("name", list(BAD))
def test_bad_frame_closes_only_that_connection(broker, healthy, name):
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        try:
            s.sendall(BAD[name])
        except (BrokenPipeError, ConnectionResetError):
            pass  # closed even before we finished writing: fine
        assert _closed_by_peer(s), f"{name}: connection left open"
    healthy()
    assert metadata_ping(broker.host, broker.port)


def test_unsupported_api_versions_version_answers_error_35(broker, healthy):
    """ApiVersions at a version the broker lacks: error 35 in a v0 answer, not a close."""
    with socket.create_connection((broker.host, broker.port), timeout=10) as s:
        s.sendall(_frame(_header(18, 99, correlation=42)))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        data = s.recv(size, socket.MSG_WAITALL)
    correlation, error = struct.unpack_from(">ih", data)
    assert (correlation, error) == (42, 35)
    healthy()


def _serve(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpbroker", "serve", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def _assert_one_line_error(result, *needles):
    assert result.returncode != 0
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("hpbroker serve:")]
    assert len(errors) == 1, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def test_unknown_config_key_is_one_line_error(tmp_path):
    result = _serve("--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}",
                    "--set", "num.partitons=3")
    _assert_one_line_error(result, "num.partitons")
    assert result.stderr.strip().count("\n") == 0, "more than one line on stderr"


def test_busy_data_dir_is_one_line_error(broker):
    result = _serve("--data-dir", str(broker.data_dir), "--listen", f"127.0.0.1:{free_port()}")
    _assert_one_line_error(result, str(broker.data_dir))
    assert metadata_ping(broker.host, broker.port), "the running broker was disturbed"
    assert broker.proc.poll() is None
