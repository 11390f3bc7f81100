"""``compression.type``, its levels and ``message.format.version``: the
settings as Kafka names and validates them, and what the log does with a
produced batch under each."""

import dataclasses
import struct

import pytest

from hpbroker.kernels import layout
from hpbroker.records import Record, compute_crc, decode_batch, encode_batch, encode_control_batch, read_header
from hpbroker.server.config import BrokerConfig
from hpbroker.storage import CorruptBatchError, Log, LogConfig, RecordTooLargeError
from hpbroker.storage.config import ConfigError, broker_log_properties
from hpbroker.storage.log import ORIGIN_COORDINATOR
from tests.log_helpers import batches_in, make_batch, read_all

GZIP, SNAPPY, LZ4, ZSTD = layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4, layout.CODEC_ZSTD


def open_log(tmp_path, **config):
    return Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(**config))


def stored_codecs(log) -> list[int]:
    return [b.header.compression for b in batches_in(log.read_records(0, 1 << 24))]


# --- the settings -------------------------------------------------------------------

def test_kafkas_defaults_and_names():
    config = LogConfig()
    props = config.topic_properties()
    assert (props["compression.type"], props["compression.gzip.level"], props["compression.lz4.level"],
            props["compression.zstd.level"], props["message.format.version"]) == ("producer", "-1", "9", "3", "3.0-IV1")
    assert config.target_codec is None
    broker = broker_log_properties(config)
    assert broker["compression.type"] == "producer" and broker["log.message.format.version"] == "3.0-IV1"
    assert "compression.zstd.level" in broker


@pytest.mark.parametrize("value, codec", [("uncompressed", 0), ("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4),
                                          ("zstd", ZSTD), ("producer", None)])
def test_each_compression_type(value, codec):
    assert LogConfig().with_overrides({"compression.type": value}).target_codec == codec


def test_the_level_in_force_is_the_target_codecs():
    levels = {"compression.gzip.level": "1", "compression.lz4.level": "17", "compression.zstd.level": "-7"}
    wanted = {"gzip": 1, "lz4": 17, "zstd": -7, "snappy": None, "uncompressed": None, "producer": None}
    for name, level in wanted.items():
        assert LogConfig().with_overrides({**levels, "compression.type": name}).compression_level == level


@pytest.mark.parametrize("key, value, message", [
    ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ("compression.type", "GZIP", "String must be one of"),  # Kafka's names are case-sensitive
    ("compression.gzip.level", "0", "between 1 and 9 or equal to -1"),
    ("compression.gzip.level", "10", "between 1 and 9 or equal to -1"),
    ("compression.lz4.level", "0", "at least 1"),
    ("compression.lz4.level", "18", "at most 17"),
    ("compression.zstd.level", "-131073", "at least -131072"),
    ("compression.zstd.level", "23", "at most 22"),
    ("message.format.version", "4.0", "Version 4.0 is not a valid version"),
    ("message.format.version", "0.7", "not a valid version"),
    ("message.format.version", "3.0-IV2", "not a valid version"),
])
def test_invalid_values_name_the_key(key, value, message):
    with pytest.raises(ConfigError, match=f"for {key}: .*{message}"):
        LogConfig().with_overrides({key: value})


@pytest.mark.parametrize("value", ["0.8.2", "0.10.2-IV0", "0.11.0.3", "1.0", "2.1-IV2", "2.8.1", "3.0-IV1", "3.9"])
def test_message_format_version_is_accepted_and_changes_nothing(value):
    config = LogConfig().with_overrides({"message.format.version": value})
    assert config.message_format_version == value  # shown as given
    assert dataclasses.replace(config, message_format_version=LogConfig().message_format_version) == LogConfig()


def test_broker_level_settings():
    config = BrokerConfig.from_sources(overrides={"compression.type": "gzip", "compression.gzip.level": "9",
                                                  "log.message.format.version": "2.8"})
    assert (config.log.target_codec, config.log.compression_level, config.log.message_format_version) \
        == (GZIP, 9, "2.8")
    # a topic's own setting wins over the broker's
    assert config.log.with_overrides({"compression.type": "producer"}).target_codec is None
    with pytest.raises(ConfigError, match="compression.type"):
        BrokerConfig.from_sources(overrides={"compression.type": "none"})


# --- the append path ----------------------------------------------------------------

def test_producer_keeps_the_batch_byte_for_byte(tmp_path):
    log = open_log(tmp_path)
    sent = make_batch(40, codec=LZ4)
    log.append(bytearray(sent), leader_epoch=3)
    stored = log.read_records(0)
    # only the broker's stamps outside the CRC differ: base offset (0 here) and leader epoch
    assert stored[:12] == sent[:12] and stored[16:] == sent[16:]


def test_batches_are_stored_in_the_topics_codec(tmp_path):
    log = open_log(tmp_path, compression_type="zstd")
    sent = [make_batch(30, codec=LZ4, tag="a"), make_batch(20, codec=GZIP, tag="b"), make_batch(10, tag="c"),
            make_batch(5, codec=ZSTD, tag="d")]
    infos = [log.append(bytearray(b)) for b in sent]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 29), (30, 49), (50, 59), (60, 64)]
    assert stored_codecs(log) == [ZSTD] * 4
    expected = [r for b in sent for r in decode_batch(b).records]
    got = read_all(log)
    assert [r.offset for r in got] == list(range(65))
    assert [(r.key, r.value, r.timestamp, r.headers) for r in got] == \
           [(r.key, r.value, r.timestamp, r.headers) for r in expected]


def test_a_batch_already_in_the_codec_is_not_touched(tmp_path):
    log = open_log(tmp_path, compression_type="zstd", compression_zstd_level=19)
    sent = make_batch(40, codec=ZSTD)  # written at zstd's default level 3
    log.append(bytearray(sent))
    assert log.read_records(0)[16:] == sent[16:]


def test_log_append_time_is_stamped_on_the_recompressed_batch(tmp_path):
    log = open_log(tmp_path, compression_type="gzip", message_timestamp_type="LogAppendTime")
    info = log.append(bytearray(make_batch(10, codec=SNAPPY)), timestamp_ms=1_800_000_000_000)
    batch = decode_batch(log.read_records(0))  # verifies the CRC
    assert batch.header.compression == GZIP and info.log_append_time == 1_800_000_000_000
    assert batch.header.timestamp_type == 1 and {r.timestamp for r in batch} == {1_800_000_000_000}


def _idempotent(seq: int, count: int = 5) -> bytes:
    records = [Record(offset=i, timestamp=1_700_000_000_000 + i, key=b"k", value=b"v%d" % (seq + i))
               for i in range(count)]
    return encode_batch(records, compression=LZ4, producer_id=77, producer_epoch=2, base_sequence=seq)


def test_idempotent_producers_keep_their_sequence_and_retries_are_deduplicated(tmp_path):
    log = open_log(tmp_path, compression_type="zstd")
    first = log.append(bytearray(_idempotent(0)))
    log.append(bytearray(_idempotent(5)))
    retry = log.append(bytearray(_idempotent(0)))
    assert (retry.batches, retry.first_offset, retry.last_offset) == (0, first.first_offset, first.last_offset)
    headers = [b.header for b in batches_in(log.read_records(0))]
    assert [(h.compression, h.producer_id, h.producer_epoch, h.base_sequence) for h in headers] == \
           [(ZSTD, 77, 2, 0), (ZSTD, 77, 2, 5)]
    entry = log.producer_state.entry(77)
    assert entry is not None
    assert (entry.last_seq, entry.last_data_offset) == (9, 9)


def test_transaction_markers_are_kept_as_written(tmp_path):
    log = open_log(tmp_path, compression_type="gzip")
    marker = encode_control_batch(1, producer_id=9, producer_epoch=0, coordinator_epoch=0, timestamp=1)
    log.append(bytearray(marker), origin=ORIGIN_COORDINATOR)
    assert log.read_records(0)[16:] == marker[16:]


def test_a_batch_grown_past_max_message_bytes_is_refused(tmp_path):
    records = [Record(offset=i, timestamp=i, key=None, value=b"a" * 1000) for i in range(100)]
    sent = encode_batch(records, compression=ZSTD)  # ~100 KB of records in a few hundred bytes
    log = open_log(tmp_path, compression_type="uncompressed", max_message_bytes=10_000)
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        log.append(bytearray(sent))
    assert log.log_end_offset == 0


def test_records_that_do_not_decompress_are_corrupt_message(tmp_path):
    sent = bytearray(make_batch(10, codec=GZIP))
    sent[70:80] = b"\0" * 10  # inside the gzip member
    struct.pack_into(">I", sent, layout.CRC, compute_crc(sent))
    log = open_log(tmp_path, compression_type="zstd")
    with pytest.raises(CorruptBatchError, match="cannot recompress to zstd"):
        log.append(sent)
    assert log.log_end_offset == 0
    open_log(tmp_path / "other").append(bytearray(sent))  # compression.type=producer never looks inside


def test_a_config_change_applies_to_the_next_append(tmp_path):
    log = open_log(tmp_path)
    log.append(bytearray(make_batch(5, codec=LZ4)))
    log.config = log.config.with_overrides({"compression.type": "snappy"})
    log.append(bytearray(make_batch(5, codec=LZ4)))
    log.config = log.config.with_overrides({"compression.type": "producer"})
    log.append(bytearray(make_batch(5, codec=LZ4)))
    assert stored_codecs(log) == [LZ4, SNAPPY, LZ4]
    assert read_header(log.read_records(5)).compression == SNAPPY
