"""A throwaway Kafka "broker" that records the Produce requests real clients send.

It speaks just enough of the wire protocol for a producer to deliver: ApiVersions,
Metadata (one broker: itself; one topic with one partition) and Produce.  Every
request version it advertises is non-flexible, so no compact lengths or tagged
fields need writing; the one flexible request it sees is the client's first
ApiVersions (v3/v4), answered like Kafka does with error 35 encoded as v0 and
the supported ApiVersions range, after which clients retry with v2.

Advertised ranges (why):
* Produce 0..7: MinVersion 0, or librdkafka < 2.11.1 silently sends gzip,
  snappy and lz4 batches uncompressed; 7 is the last non-flexible version and
  the one librdkafka needs for zstd.
* Fetch 0..10: never used, but librdkafka enables zstd only with Fetch >= 10,
  and kafka-python infers broker 2.1 from it (it refuses zstd below 2.1).
* FindCoordinator 0..0: never used, but librdkafka takes it as the sign of a
  broker >= 0.8.2 and otherwise sends lz4 batches uncompressed.
* Metadata 0..1, ApiVersions 0..2.

Run ``python tests/fake_kafka_capture.py`` to rewrite ``tests/golden/``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import selectors
import socket
import struct
import sys
import threading
from dataclasses import dataclass, field
from typing import Literal

API_PRODUCE, API_FETCH, API_METADATA, API_FIND_COORDINATOR, API_VERSIONS = 0, 1, 3, 10, 18
SUPPORTED = {API_PRODUCE: (0, 7), API_FETCH: (0, 10), API_METADATA: (0, 1), API_FIND_COORDINATOR: (0, 0),
             API_VERSIONS: (0, 2)}
UNSUPPORTED_VERSION = 35
NODE_ID = 1
Codec = Literal["none", "gzip", "snappy", "lz4", "zstd"]
CODECS: tuple[Codec, ...] = ("none", "gzip", "snappy", "lz4", "zstd")
GOLDEN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "golden")


# --- tiny wire helpers ------------------------------------------------------------

class _Reader:
    def __init__(self, data: bytes, pos: int = 0):
        self.data, self.pos = data, pos

    def _unpack(self, fmt: str):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return value

    def int16(self):
        return self._unpack(">h")

    def int32(self):
        return self._unpack(">i")

    def string(self):
        n = self.int16()
        if n < 0:
            return None
        s = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self):
        n = self.int32()
        if n < 0:
            return None
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def _string(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    raw = s.encode()
    return struct.pack(">h", len(raw)) + raw


def _array(items: list[bytes]) -> bytes:
    return struct.pack(">i", len(items)) + b"".join(items)


# --- the server ------------------------------------------------------------------

@dataclass
class Capture:
    client_id: str | None
    api_version: int
    topic: str
    partition: int
    records: bytes


@dataclass
class FakeKafka:
    """Start with ``with FakeKafka() as server:``; ``server.bootstrap`` is its address."""

    topic: str = "capture"
    captures: list[Capture] = field(default_factory=list)
    requests: list[tuple[int, int]] = field(default_factory=list)  # (api key, version) seen

    def __post_init__(self):
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.host, self.port = self._listener.getsockname()[:2]
        self._cond = threading.Condition()
        self._wake_r, self._wake_w = socket.socketpair()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._accepter = threading.Thread(target=self._accept_loop, name="fake-kafka-accept", daemon=True)
        self._produce_offset = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def __enter__(self):
        self._accepter.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self._wake_w.send(b"x")
        self._accepter.join(timeout=5)
        with self._cond:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in recv
            except OSError:
                pass
        for thread in self._threads:
            thread.join(timeout=5)
        for sock in (self._listener, self._wake_r, self._wake_w, *conns):
            sock.close()

    def wait_for_records(self, count: int, timeout: float = 15.0) -> bool:
        """Wait until the captured batches hold ``count`` records in total."""
        from hpbroker.records import iter_batches

        def enough():
            total = sum(len(b) for c in self.captures for b in iter_batches(c.records))
            return total >= count

        with self._cond:
            return self._cond.wait_for(enough, timeout)

    def record_bytes(self) -> bytes:
        with self._cond:
            return b"".join(c.records for c in self.captures)

    # -- connection handling --

    def _accept_loop(self):
        with selectors.DefaultSelector() as sel:
            sel.register(self._listener, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = [key.fileobj for key, _ in sel.select()]
                if self._wake_r in ready:
                    return
                conn, _ = self._listener.accept()
                thread = threading.Thread(target=self._serve, args=(conn,), name="fake-kafka-conn", daemon=True)
                with self._cond:
                    self._conns.append(conn)
                    self._threads.append(thread)
                thread.start()

    def _recv_exact(self, conn: socket.socket, n: int) -> bytes | None:
        chunks = []
        while n:
            chunk = conn.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def _serve(self, conn: socket.socket):
        try:
            while True:
                size = self._recv_exact(conn, 4)
                if size is None:
                    return
                frame = self._recv_exact(conn, struct.unpack(">i", size)[0])
                if frame is None:
                    return
                reply = self._handle(frame)
                if reply is not None:
                    conn.sendall(struct.pack(">i", len(reply)) + reply)
        except OSError:
            return

    def _handle(self, frame: bytes) -> bytes | None:
        api_key, version, correlation_id = struct.unpack_from(">hhi", frame)
        with self._cond:
            self.requests.append((api_key, version))
        head = struct.pack(">i", correlation_id)  # response header v0 for everything we answer
        if api_key == API_VERSIONS:
            return head + self._api_versions(version)
        low, high = SUPPORTED.get(api_key, (0, -1))
        if not low <= version <= high:
            raise OSError(f"client sent api {api_key} v{version}, outside what we advertised")
        # Request header v1: key, version, correlation id, int16-length client id.
        reader = _Reader(frame, 8)
        client_id = reader.string()
        if api_key == API_METADATA:
            return head + self._metadata(version)
        if api_key == API_PRODUCE:
            body = self._produce(version, reader, client_id)
            return None if body is None else head + body
        raise OSError(f"unexpected api key {api_key}")

    def _api_versions(self, version: int) -> bytes:
        if version > SUPPORTED[API_VERSIONS][1]:
            # Kafka's answer to a version it does not know: error 35, v0 body,
            # and its own ApiVersions range so the client can retry lower.
            low, high = SUPPORTED[API_VERSIONS]
            return struct.pack(">hi", UNSUPPORTED_VERSION, 1) + struct.pack(">hhh", API_VERSIONS, low, high)
        keys = [struct.pack(">hhh", k, low, high) for k, (low, high) in sorted(SUPPORTED.items())]
        body = struct.pack(">h", 0) + _array(keys)
        if version >= 1:
            body += struct.pack(">i", 0)  # throttle time
        return body

    def _metadata(self, version: int) -> bytes:
        broker = struct.pack(">i", NODE_ID) + _string(self.host) + struct.pack(">i", self.port)
        if version >= 1:
            broker += _string(None)  # rack
        partition = struct.pack(">hii", 0, 0, NODE_ID) + _array([struct.pack(">i", NODE_ID)]) * 2
        topic = struct.pack(">h", 0) + _string(self.topic)
        if version >= 1:
            topic += b"\x00"  # is_internal
        topic += _array([partition])
        body = _array([broker])
        if version >= 1:
            body += struct.pack(">i", NODE_ID)  # controller id
        return body + _array([topic])

    def _produce(self, version: int, reader: _Reader, client_id: str | None) -> bytes | None:
        if version >= 3:
            reader.string()  # transactional id
        acks = reader.int16()
        reader.int32()  # timeout
        topics = []
        for _ in range(reader.int32()):
            name = reader.string()
            assert name is not None, "a Produce request's topic name is not nullable"
            partitions = []
            for _ in range(reader.int32()):
                index = reader.int32()
                records = reader.bytes_() or b""
                with self._cond:
                    self.captures.append(Capture(client_id, version, name, index, records))
                    base = self._produce_offset
                    self._produce_offset += 1_000
                    self._cond.notify_all()
                part = struct.pack(">ihq", index, 0, base)
                if version >= 2:
                    part += struct.pack(">q", -1)  # log append time: none (CreateTime)
                if version >= 5:
                    part += struct.pack(">q", 0)  # log start offset
                partitions.append(part)
            topics.append(_string(name) + _array(partitions))
        if acks == 0:
            return None
        body = _array(topics)
        if version >= 1:
            body += struct.pack(">i", 0)  # throttle time
        return body


# --- what the clients send ----------------------------------------------------------

@dataclass(frozen=True)
class Sample:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int


def sample_messages(client: str) -> list[Sample]:
    """The messages each capture sends: null key/value, headers, a >32 KiB value.

    The big value spans more than one 32 KiB xerial snappy block.  kafka-python
    cannot send a header with a null value, so only librdkafka gets one.
    """
    big = b"".join(b"%06d|hpbroker golden capture;" % i for i in range(1_200))
    null_header = (("nullable", None),) if client == "confluent" else ()
    return [
        Sample(b"key-0", b"first value, " * 10, (("trace-id", b"abc123"), ("n", b"\x00\x01\x02")), 1_700_000_000_000),
        Sample(None, b"no key here " * 10, (), 1_700_000_000_005),
        Sample(b"tombstone", None, null_header, 1_699_999_999_990),
        Sample(b"big", big, (("size", str(len(big)).encode()),), 1_700_000_000_100),
        Sample("ключ".encode(), "значение ✓ ".encode() * 10, (("utf8-\u00e9", "é".encode()),), 1_700_000_000_101),
    ]


def produce_confluent(bootstrap: str, topic: str, codec: Codec, messages: list[Sample]) -> dict:
    import confluent_kafka

    errors = []

    def delivered(err, _msg) -> None:
        if err:
            errors.append(err)

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap,
        "compression.type": codec,
        "batch.size": 1 << 20,
        "acks": 1,
        "linger.ms": 50,  # gather all messages into one batch before flush() sends it
        "enable.idempotence": False,
        "message.timeout.ms": 15_000,
        "log_level": 3,
        "client.id": "golden-confluent",
    })
    try:
        for m in messages:
            producer.produce(topic, key=m.key, value=m.value, headers=list(m.headers), timestamp=m.timestamp,
                             partition=0, on_delivery=delivered)
        left = producer.flush(15)
    finally:
        del producer  # rd_kafka_destroy: joins librdkafka's threads
    if left or errors:
        raise RuntimeError(f"confluent-kafka did not deliver: {left} left, errors {errors}")
    return {"client": "confluent-kafka", "version": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0]}


def _kafka_python_headers(m: Sample) -> list[tuple[str, bytes]]:
    headers = []
    for key, value in m.headers:
        assert value is not None, "kafka-python cannot send a null header value"
        headers.append((key, value))
    return headers


def produce_kafka_python(bootstrap: str, topic: str, codec: Codec, messages: list[Sample]) -> dict:
    import kafka
    import kafka.version

    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks=1,
        linger_ms=50,
        batch_size=1 << 20,  # keep the >32 KiB message in the same batch as the rest
        enable_idempotence=False,
        client_id="golden-kafka-python",
        request_timeout_ms=15_000,
        max_block_ms=15_000,
    )
    try:
        futures = [producer.send(topic, key=m.key, value=m.value, headers=_kafka_python_headers(m),
                                 timestamp_ms=m.timestamp, partition=0) for m in messages]
        producer.flush(timeout=15)
        for f in futures:
            f.get(timeout=15)
    finally:
        producer.close(timeout=5)
    return {"client": "kafka-python", "version": kafka.version.__version__}


PRODUCERS = {"confluent": produce_confluent, "kafka-python": produce_kafka_python}


def capture(client: str, codec: Codec) -> tuple[bytes, list[Sample], dict, list[Capture]]:
    """Run one real client against a fresh fake broker; return its record bytes."""
    messages = sample_messages(client)
    with FakeKafka() as server:
        info = PRODUCERS[client](server.bootstrap, server.topic, codec, messages)
        if not server.wait_for_records(len(messages)):
            raise RuntimeError(f"{client}/{codec}: the fake broker saw too few records")
        info["produce_versions"] = sorted({c.api_version for c in server.captures})
        return server.record_bytes(), messages, info, list(server.captures)


# --- golden files ------------------------------------------------------------------

def _encode_bytes(data: bytes | None):
    """JSON form of bytes: text when short UTF-8, else length + SHA-256."""
    if data is None:
        return None
    if len(data) <= 200:
        try:
            return {"utf8": data.decode("utf-8")}
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(data).decode()}
    return {"len": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def expected_json(messages: list[Sample], info: dict, codec: str) -> dict:
    return {
        "codec": codec,
        "producer": info,
        "records": [
            {"key": _encode_bytes(m.key), "value": _encode_bytes(m.value), "timestamp": m.timestamp,
             "headers": [[k, _encode_bytes(v)] for k, v in m.headers]}
            for m in messages
        ],
    }


def bytes_match(encoded, data: bytes | None) -> bool:
    return encoded == _encode_bytes(data)


def write_golden(directory: str = GOLDEN_DIR):
    os.makedirs(directory, exist_ok=True)
    for client in PRODUCERS:
        for codec in CODECS:
            data, messages, info, _ = capture(client, codec)
            stem = os.path.join(directory, f"{client}-{codec}")
            with open(stem + ".bin", "wb") as f:
                f.write(data)
            with open(stem + ".json", "w") as f:
                json.dump(expected_json(messages, info, codec), f, indent=1, ensure_ascii=False)
                f.write("\n")
            print(f"{stem}.bin: {len(data)} bytes, produce v{info['produce_versions']}")


if __name__ == "__main__":
    write_golden(sys.argv[1] if len(sys.argv) > 1 else GOLDEN_DIR)
