"""``compression.type`` through a real broker and real clients: the broker
recompresses what confluent-kafka (lz4, idempotent) and kafka-python (gzip)
send into the topic's codec, both clients read every record back intact, the
setting changes live and falls back to the broker's ``--set`` default, and
DescribeConfigs says where each value comes from."""

import time
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
    ResourceType,
)

from harness.waiting import wait_for
from hpbroker.records import iter_batches
from tests.integration.clients import ck_consume, ck_produce, kp_consume, kp_produce, topic_name
from tests.integration.conftest import module_broker

broker = module_broker({"compression.type": "gzip"})  # the broker-wide default
# AlterConfigs (33) is deprecated in confluent-kafka but still what many tools send
pytestmark = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")

NONE, GZIP, SNAPPY, LZ4, ZSTD = range(5)
INVALID_CONFIG = 40
# confluent-kafka settings for ck_produce's **conf (their names are not identifiers)
LZ4_PRODUCER: dict[str, Any] = {"compression.type": "lz4"}
SNAPPY_PRODUCER: dict[str, Any] = {"compression.type": "snappy"}


def _admin(broker) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _create(admin, topic, config=None):
    admin.create_topics([NewTopic(topic, 1, 1, config=config or {})])[topic].result(30)


def _stored(broker, topic) -> list:
    """The headers of the batches in the partition's segment files, read with
    hpbroker's own decoder (which checks every CRC and decompresses)."""
    headers = []
    for path in sorted((broker.data_dir / f"{topic}-0").glob("*.log")):
        headers += [b.header for b in iter_batches(path.read_bytes())]
    return headers


def _records(n: int, tag: str) -> list[dict]:
    base = int(time.time() * 1000) - 60_000
    return [{"key": None if i % 11 == 0 else b"%s-%d" % (tag.encode(), i),
             "value": None if i == 7 else (b"%s value %05d|" % (tag.encode(), i)) * (1 + i % 30),
             "headers": [] if i % 3 == 0 else [("trace", b"t%d" % i), ("empty", b"")],
             "timestamp": base + i, "partition": 0} for i in range(n)]


def _check_intact(got, acks, sent):
    by_offset = {offset: r for (_, offset), r in zip(acks, sent)}
    assert sorted(r.offset for r in got) == sorted(by_offset)
    for r in got:
        want = by_offset[r.offset]
        assert (r.key, r.value, list(r.headers), r.timestamp) == \
               (want["key"], want["value"], want["headers"], want["timestamp"]), r.offset


def _describe(admin, topic) -> dict:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (e.value, ConfigSource(e.source)) for name, e in entries.items()}


def test_a_zstd_topic_stores_zstd_from_both_clients(broker):
    admin = _admin(broker)
    topic = topic_name("zstd")
    _create(admin, topic, {"compression.type": "zstd"})
    lz4_sent, gzip_sent = _records(300, "ck"), _records(300, "kp")
    acks = ck_produce(broker.bootstrap, topic, lz4_sent, **{"compression.type": "lz4", "enable.idempotence": True})
    acks += kp_produce(broker.bootstrap, topic, gzip_sent, compression_type="gzip", enable_idempotence=False)

    headers = _stored(broker, topic)
    assert {h.compression for h in headers} == {ZSTD}
    assert sum(h.record_count for h in headers) == 600
    assert any(h.producer_id >= 0 and h.base_sequence >= 0 for h in headers)  # the idempotent producer's

    sent = lz4_sent + gzip_sent
    _check_intact(ck_consume(broker.bootstrap, topic, [0], 600), acks, sent)
    _check_intact(kp_consume(broker.bootstrap, topic, [0], 600), acks, sent)


def _produce_until_stored_as(broker, topic, codec) -> tuple[list, list]:
    """A worker applies changed topic settings on its next tick: produce one
    record at a time until one is stored in ``codec``; every record sent and
    its ack are returned for the final check."""
    sent, acks = [], []

    def probe():
        record = _records(1, f"probe{len(sent)}")[0]
        acks.extend(ck_produce(broker.bootstrap, topic, [record], **LZ4_PRODUCER))
        sent.append(record)
        return _stored(broker, topic)[-1].compression == codec

    wait_for(probe, timeout=10, what=f"batches stored with codec {codec}", interval=0.1)
    return sent, acks


def test_alter_configs_changes_it_live_and_delete_falls_back_to_the_broker(broker):
    admin = _admin(broker)
    topic = topic_name("live")
    _create(admin, topic, {"compression.type": "zstd"})
    sent = _records(50, "first")
    acks = ck_produce(broker.bootstrap, topic, sent, **LZ4_PRODUCER)
    assert {h.compression for h in _stored(broker, topic)} == {ZSTD}

    # AlterConfigs (33) replaces the topic's settings
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"compression.type": "snappy"})
    admin.alter_configs([resource])[resource].result(30)
    assert _describe(admin, topic)["compression.type"] == ("snappy", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    more, more_acks = _produce_until_stored_as(broker, topic, SNAPPY)
    sent, acks = sent + more, acks + more_acks

    # IncrementalAlterConfigs (44) DELETE: back to the broker's gzip
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    assert _describe(admin, topic)["compression.type"] == ("gzip", ConfigSource.STATIC_BROKER_CONFIG)
    more, more_acks = _produce_until_stored_as(broker, topic, GZIP)
    sent, acks = sent + more, acks + more_acks

    codecs = [h.compression for h in _stored(broker, topic)]
    assert codecs[0] == ZSTD and SNAPPY in codecs and codecs[-1] == GZIP
    _check_intact(kp_consume(broker.bootstrap, topic, [0], len(sent)), acks, sent)


def test_the_broker_default_and_a_topic_that_keeps_the_producers_codec(broker):
    admin = _admin(broker)
    plain, keeps = topic_name("default"), topic_name("producer")
    _create(admin, plain)
    _create(admin, keeps, {"compression.type": "producer"})
    sent = _records(100, "x")
    plain_acks = kp_produce(broker.bootstrap, plain, sent, compression_type="lz4", enable_idempotence=False)
    keeps_acks = kp_produce(broker.bootstrap, keeps, sent, compression_type="lz4", enable_idempotence=False)
    assert {h.compression for h in _stored(broker, plain)} == {GZIP}
    assert {h.compression for h in _stored(broker, keeps)} == {LZ4}
    _check_intact(ck_consume(broker.bootstrap, plain, [0], 100), plain_acks, sent)
    _check_intact(ck_consume(broker.bootstrap, keeps, [0], 100), keeps_acks, sent)


def test_describe_configs_says_where_each_value_comes_from(broker):
    admin = _admin(broker)
    topic = topic_name("described")
    _create(admin, topic, {"compression.type": "zstd", "compression.zstd.level": "7", "message.format.version": "2.8"})
    got = _describe(admin, topic)
    assert got["compression.type"] == ("zstd", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert got["compression.zstd.level"] == ("7", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert got["message.format.version"] == ("2.8", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert got["compression.gzip.level"] == ("-1", ConfigSource.DEFAULT_CONFIG)
    assert got["compression.lz4.level"] == ("9", ConfigSource.DEFAULT_CONFIG)

    resource = ConfigResource(ResourceType.BROKER, "0")
    entries = admin.describe_configs([resource])[resource].result(30)
    assert (entries["compression.type"].value, ConfigSource(entries["compression.type"].source)) == \
           ("gzip", ConfigSource.STATIC_BROKER_CONFIG)
    version = entries["log.message.format.version"]
    assert (version.value, ConfigSource(version.source)) == ("3.0-IV1", ConfigSource.DEFAULT_CONFIG)


def test_message_format_version_is_accepted_and_changes_nothing(broker):
    admin = _admin(broker)
    topic = topic_name("mfv")
    _create(admin, topic, {"message.format.version": "0.10.2", "compression.type": "producer"})
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config={"message.format.version": "3.0-IV1",
                                                                      "compression.type": "producer"})
    admin.alter_configs([resource])[resource].result(30)
    sent = _records(20, "v")
    acks = ck_produce(broker.bootstrap, topic, sent, **SNAPPY_PRODUCER)
    headers = _stored(broker, topic)
    assert {h.compression for h in headers} == {SNAPPY} and {h.magic for h in headers} == {2}
    _check_intact(kp_consume(broker.bootstrap, topic, [0], 20), acks, sent)


@pytest.mark.parametrize("config, message", [
    ({"compression.type": "brotli"}, "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
    ({"compression.zstd.level": "23"}, "compression.zstd.level"),
    ({"message.format.version": "4.0"}, "Version 4.0 is not a valid version"),
])
def test_invalid_values_get_invalid_config_with_the_reason(broker, config, message):
    admin = _admin(broker)
    topic = topic_name("invalid")
    with pytest.raises(ck.KafkaException) as failed:
        _create(admin, topic, config)
    error = failed.value.args[0]
    assert error.code() == INVALID_CONFIG and message in error.str(), error.str()

    _create(admin, topic)
    resource = ConfigResource(ResourceType.TOPIC, topic, set_config=config)
    with pytest.raises(ck.KafkaException) as failed:
        admin.alter_configs([resource])[resource].result(30)
    error = failed.value.args[0]
    assert error.code() == INVALID_CONFIG and message in error.str(), error.str()
