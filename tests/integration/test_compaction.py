"""A compacted topic through the broker: the cleaner thread of the owning
worker compacts it while clients read; a consumer from the beginning then sees
exactly the latest record of every key, at its original offset."""

from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for
from tests.integration.clients import ck_consume, ck_produce, topic_name


def test_keyed_topic_compacts_record_by_record(broker_factory):
    broker = broker_factory({"log.cleaner.backoff.ms": "100"})
    topic = topic_name("compacted")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "86400000"})])[topic].result(30)

    latest, records = {}, []
    for round_ in range(6):  # one produce call per round: separate batches, so segments roll
        batch = [{"key": b"key-%02d" % k,
                  "value": None if (k == 7 and round_ == 5) else b"round %d " % round_ + b"x" * 100}
                 for k in range(20)]
        for record, (_partition, offset) in zip(batch, ck_produce(broker.bootstrap, topic, batch)):
            latest[record["key"]] = (offset, record["value"])
        records += batch

    last_offset = max(offset for offset, _ in latest.values())

    def compacted():
        """Everything from the beginning up to the last offset, once some records are gone."""
        got = ck_consume(broker.bootstrap, topic, [0], len(records), timeout=5)
        if got and got[-1].offset == last_offset and len(got) < len(records):
            return got
        return None

    got = wait_for(compacted, timeout=60, what="the cleaner to compact the rolled segments")
    # Every key's latest record survives at its original offset (the tombstone
    # too: delete.retention.ms has not passed); the active segment is left alone,
    # so some older records may remain there, but never one of a key older than
    # a record of that key in a cleaned segment.
    by_key = {}
    for rec in got:
        by_key.setdefault(rec.key, []).append((rec.offset, rec.value))
    assert set(by_key) == set(latest)
    for key, (offset, value) in latest.items():
        assert by_key[key][-1] == (offset, value)
    offsets_seen = [rec.offset for rec in got]
    assert offsets_seen == sorted(offsets_seen)
