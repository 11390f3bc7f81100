"""Record batches captured from real producers decode to what they sent.

``tests/golden/<client>-<codec>.bin`` holds the records field of the Produce
requests (back-to-back v2 batches) that confluent-kafka (librdkafka) and
kafka-python sent to ``tests/fake_kafka_capture.py``; the ``.json`` next to it
lists the records sent, bytes given as ``{"utf8": text}``, ``{"base64": ...}``
or, when long, ``{"len": n, "sha256": hex}``.
"""

import base64
import hashlib
import json
import pathlib

import crc32c
import pytest

from hpbroker.kernels import layout
from hpbroker.records import compute_crc, encode_batch, iter_batches
from hpbroker.records.compression import LZ4_FRAME_MAGIC, XERIAL_MAGIC

GOLDEN = pathlib.Path(__file__).resolve().parent / "golden"
CLIENTS = ["confluent", "kafka-python"]
STEMS = sorted(p.stem for p in GOLDEN.glob("*.bin"))


def load(stem):
    data = (GOLDEN / f"{stem}.bin").read_bytes()
    expected = json.loads((GOLDEN / f"{stem}.json").read_text(encoding="utf-8"))
    return data, expected


def matches(spec, data) -> bool:
    """Does ``data`` (bytes or None) match its JSON description?"""
    if spec is None or data is None:
        return spec is None and data is None
    if "utf8" in spec:
        return data == spec["utf8"].encode("utf-8")
    if "base64" in spec:
        return data == base64.b64decode(spec["base64"])
    return len(data) == spec["len"] and hashlib.sha256(data).hexdigest() == spec["sha256"]


def test_every_client_and_codec_is_captured():
    assert STEMS == sorted(f"{c}-{codec}" for c in CLIENTS for codec in layout.CODEC_NAMES)


@pytest.mark.parametrize("stem", STEMS)
def test_golden_decodes_to_the_records_sent(stem):
    data, expected = load(stem)
    batches = list(iter_batches(data))  # verifies every CRC
    records = [r for b in batches for r in b]
    sent = expected["records"]
    assert len(records) == len(sent)
    for i, (got, want) in enumerate(zip(records, sent)):
        assert matches(want["key"], got.key), (i, "key")
        assert matches(want["value"], got.value), (i, "value")
        assert got.timestamp == want["timestamp"], (i, "timestamp")
        assert len(got.headers) == len(want["headers"]), (i, "headers")
        for header, (name, value) in zip(got.headers, want["headers"]):
            assert header.key == name.encode("utf-8"), (i, name)
            assert matches(value, header.value), (i, name)


@pytest.mark.parametrize("stem", STEMS)
def test_golden_header(stem):
    data, expected = load(stem)
    for batch in iter_batches(data):
        h = batch.header
        assert h.compression == layout.CODEC_NAMES.index(expected["codec"])
        # What a CreateTime, non-idempotent producer writes.
        assert not (h.is_transactional or h.is_control or h.has_delete_horizon)
        assert h.timestamp_type == 0
        assert h.producer_id == layout.NO_PRODUCER_ID
        # Producers number records 0..n-1 from base offset 0; the broker stamps it.
        assert [r.offset for r in batch] == list(range(h.record_count))
        assert h.max_timestamp == max(r.timestamp for r in batch)


@pytest.mark.parametrize("stem", STEMS)
def test_golden_crc(stem):
    data, _ = load(stem)
    pos = 0
    for batch in iter_batches(data):
        end = pos + batch.header.size
        assert batch.header.crc == crc32c.crc32c(data[pos + layout.CRC_START : end]) == compute_crc(data, pos)
        pos = end
    assert pos == len(data)


def _body(stem):
    data, _ = load(stem)
    return data[layout.RECORDS :]


def test_golden_snappy_framings():
    # librdkafka sends raw snappy, kafka-python xerial; both must be covered.
    assert not _body("confluent-snappy").startswith(XERIAL_MAGIC)
    assert _body("kafka-python-snappy").startswith(XERIAL_MAGIC)


@pytest.mark.parametrize("client", CLIENTS)
def test_golden_lz4_is_a_frame(client):
    assert _body(f"{client}-lz4").startswith(LZ4_FRAME_MAGIC)


@pytest.mark.parametrize("client", CLIENTS)
def test_we_write_uncompressed_batches_byte_for_byte_like_the_clients(client):
    data, _ = load(f"{client}-none")
    (batch,) = iter_batches(data)
    h = batch.header
    again = encode_batch(batch.records, base_offset=h.base_offset, partition_leader_epoch=h.partition_leader_epoch,
                         producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                         base_sequence=h.base_sequence)
    assert again == data


@pytest.mark.parametrize("stem", STEMS)
def test_golden_survives_re_encoding(stem):
    # What we decode from a client we can write again, in the same codec.
    data, _ = load(stem)
    for batch in iter_batches(data):
        again = encode_batch(batch.records, compression=batch.header.compression)
        assert list(next(iter_batches(again))) == list(batch)
