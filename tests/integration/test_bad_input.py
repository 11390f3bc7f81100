"""Bad bytes on one connection close that connection; everyone else carries on.
Bad settings or a busy data dir stop ``hpbroker serve`` with one line, no traceback."""

import socket
import struct
import subprocess
import sys

import confluent_kafka as ck
import pytest

from harness.broker import REPO, free_port, metadata_ping
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
    yield produce_one
    p.close()  # before the broker stops: a producer left alive keeps reconnecting to it


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


def _create(broker, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)


def _produce_v3(topic: str, records: bytes, acks: int, correlation: int) -> bytes:
    """Produce v3 (non-flexible): transactional id, acks, timeout, one topic, partition 0."""
    name = topic.encode()
    body = (struct.pack(">hhi", -1, acks, 30000) + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + struct.pack(">ii", 0, len(records)) + records)
    return _frame(_header(0, 3, correlation) + body)


def _produce_v2_legacy(topic: str, message_set: bytes, correlation: int) -> bytes:
    """Produce v2 with a legacy (magic 0/1) message set."""
    name = topic.encode()
    body = (struct.pack(">hi", 1, 30000) + struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
            + struct.pack(">i", 1) + struct.pack(">ii", 0, len(message_set)) + message_set)
    return _frame(_header(0, 2, correlation) + body)


def test_acks0_requests_already_sent_are_appended_after_the_client_hangs_up(broker):
    from harness.waiting import wait_for
    from hpbroker.records import Record, encode_batch
    from tests.integration.clients import ck_watermarks

    topic = topic_name("acks0")
    _create(broker, topic)
    batch = encode_batch([Record(0, 1_700_000_000_000, None, b"fire and forget")])
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.sendall(b"".join(_produce_v3(topic, batch, 0, i) for i in range(300)))
    # Kafka appends what it received even though nobody waits for an answer.
    assert wait_for(lambda: ck_watermarks(broker.bootstrap, topic)[1] == 300, timeout=30, what="300 records appended")


def test_a_failed_acks0_produce_closes_the_connection_and_a_good_one_does_not(broker, healthy):
    """acks=0 has no answer to carry an error: Kafka closes the connection so
    the client notices (and refreshes its metadata)."""
    from hpbroker.records import Record, encode_batch
    from tests.integration.clients import ck_watermarks

    topic = topic_name("acks0-failed")
    _create(broker, topic)
    good = encode_batch([Record(0, 1_700_000_000_000, None, b"fine")])
    corrupt = good[:-1] + bytes([good[-1] ^ 0xFF])  # the batch CRC no longer matches
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.settimeout(10)
        s.sendall(_produce_v3(topic, good, 0, 1) + _frame(_header(18, 0, correlation=2)))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        answer = s.recv(size, socket.MSG_WAITALL)
        assert struct.unpack_from(">ih", answer) == (2, 0)  # ApiVersions answered: still open
        s.sendall(_produce_v3(topic, corrupt, 0, 3))
        assert _closed_by_peer(s), "a failed acks=0 produce left the connection open"
    assert ck_watermarks(broker.bootstrap, topic)[1] == 1  # the good record only
    healthy()


def test_a_corrupt_legacy_message_set_is_answered_corrupt_message(broker):
    from hpbroker.records import Record, encode_message_set

    topic = topic_name("legacy")
    _create(broker, topic)
    damaged = bytearray(encode_message_set([Record(0, 0, b"k", b"v")], magic=0))
    damaged[-1] ^= 0xFF  # the value byte: the message CRC no longer matches
    with socket.create_connection(("127.0.0.1", broker.port)) as s:
        s.settimeout(10)
        s.sendall(_produce_v2_legacy(topic, bytes(damaged), 42))
        size = struct.unpack(">i", s.recv(4))[0]
        answer = b""
        while len(answer) < size:
            answer += s.recv(size - len(answer))
    # correlation id, then [topic [partition, error, ...]]
    correlation, topics, name_len = struct.unpack_from(">iih", answer)
    partition, error = struct.unpack_from(">ih", answer, 4 + 4 + 2 + name_len + 4)
    assert (correlation, topics, partition, error) == (42, 1, 0, 2)  # CORRUPT_MESSAGE, connection still served
