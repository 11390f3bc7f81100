"""Every codec, produced by one client and read back by the other: keys,
values (including a tombstone), headers, timestamps and contiguous offsets."""

import struct
import time

import pytest

from tests.integration.clients import CONSUME, PRODUCE, topic_name

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PAIRS = [("confluent", "kafka-python"), ("kafka-python", "confluent")]
N = 200
CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def _stored_codecs(partition_dir) -> set[int]:
    """Compression ids of the batches on disk (attributes & 7 at byte 21 of
    each v2 batch header), to prove the codec really went over the wire."""
    data = (partition_dir / "00000000000000000000.log").read_bytes()
    codecs, pos = set(), 0
    while pos + 61 <= len(data):
        (length,) = struct.unpack_from(">i", data, pos + 8)
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        codecs.add(attributes & 7)
        pos += 12 + length
    return codecs


def _records(n: int) -> list[dict]:
    base = int(time.time() * 1000) - 10_000
    out = []
    for i in range(n):
        out.append({
            "key": None if i % 7 == 0 else b"key-%d" % i,
            # compressible and of varying size, so batches really shrink
            "value": None if i == 5 else (b"value-%05d|" % i) * (1 + i % 40),
            "headers": [] if i % 3 == 0 else [("h1", b"x%d" % i), ("h2", b""), ("h1", b"dup")],
            "timestamp": base + i,
        })
    return out


def _compression_conf(client: str, codec: str) -> dict:
    if client == "confluent":
        return {"compression.type": codec}
    return {"compression_type": None if codec == "none" else codec, "enable_idempotence": False}


@pytest.mark.parametrize("producer,consumer", PAIRS, ids=["ck-to-kp", "kp-to-ck"])
@pytest.mark.parametrize("codec", CODECS)
def test_codec_roundtrip(broker, codec, producer, consumer):
    topic = topic_name(f"codec-{codec}")
    sent = _records(N)
    acks = PRODUCE[producer](broker.bootstrap, topic, [{**r, "partition": 0} for r in sent],
                             **_compression_conf(producer, codec))
    assert sorted(o for _, o in acks) == list(range(N)), "acknowledged offsets are not 0..N-1"

    # librdkafka sends a batch uncompressed when compressing would not shrink it
    # (a lone small record after a linger timeout), hence 0 is allowed beside the codec
    stored = _stored_codecs(broker.data_dir / f"{topic}-0")
    assert CODEC_ID[codec] in stored and stored <= {0, CODEC_ID[codec]}, stored

    got = CONSUME[consumer](broker.bootstrap, topic, [0], N)
    assert [r.offset for r in got] == list(range(N)), "offsets not contiguous from 0"
    by_offset = dict(zip((o for _, o in acks), sent))
    for r in got:
        want = by_offset[r.offset]
        assert r.key == want["key"], r.offset
        assert r.value == want["value"], r.offset
        assert list(r.headers) == want["headers"], r.offset
        assert r.timestamp == want["timestamp"], r.offset
