"""Batch reads through Spark (local[2]): the rows equal the record-by-record model."""

import os
import time

from hpbroker.records import Record, encode_batch, encode_control_batch
from hpbroker.storage import Log, LogConfig
from hpbroker.storage.log import ORIGIN_COORDINATOR
from tests.spark.model import expected_rows, spark_rows
from tests.spark.segments import ABORT, CODECS, COMMIT, PartitionWriter


def test_every_codec_several_topics_and_partitions(spark, log_dir):
    expected = []
    for topic in ("events", "events2"):
        for p in range(2):
            w = PartitionWriter(log_dir, topic, p)
            for codec in CODECS.values():
                w.append_values(40, compression=codec, headers=True)
                if codec == 2:
                    w.roll()
            expected += expected_rows(w.path, topic, p)
    PartitionWriter(log_dir, "other", 0).append_values(5)
    df = spark.read.format("hpbroker").option("subscribePattern", "events.*").load(log_dir)
    assert spark_rows(df) == expected
    one = spark.read.format("hpbroker").option("subscribe", "events2").load(log_dir)
    assert one.count() == 400
    assert df.schema.simpleString().startswith("struct<key:binary,value:binary,topic:string,partition:int")


def test_read_committed_torn_tail_and_offset_ranges(spark, log_dir):
    w = PartitionWriter(log_dir, "tx", 0)
    w.append_values(5)
    first, _ = w.append_values(6, producer_id=3, producer_epoch=0, transactional=True, compression=CODECS["zstd"])
    w.append_values(6, producer_id=4, producer_epoch=0, transactional=True)
    abort_at = w.marker(ABORT, 3)
    w.marker(COMMIT, 4)
    w.append_values(5, compression=CODECS["snappy"])
    w.txnindex([(3, first, abort_at)])
    log = os.path.join(w.path, "00000000000000000000.log")
    with open(log, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x10\x00" + b"\x01" * 40)  # a batch cut off mid-write
    reader = spark.read.format("hpbroker").option("topic", "tx")
    committed = spark_rows(reader.option("isolation", "read_committed").load(log_dir))
    assert committed == expected_rows(w.path, "tx", 0, aborted=[(3, first, abort_at)])
    assert len(committed) == 16
    uncommitted = spark_rows(spark.read.format("hpbroker").option("topic", "tx").load(log_dir))
    assert len(uncommitted) == 22
    ranged = (spark.read.format("hpbroker").option("topic", "tx")
              .option("startingOffsets", '{"tx": {"0": 8}}').option("endingOffsets", '{"tx": {"0": 20}}')
              .load(log_dir))
    assert [r.offset for r in ranged.orderBy("offset").collect()] == [8, 9, 10, 11, 12, 13, 14, 15, 16, 19]


def test_read_committed_over_a_directory_the_broker_wrote(spark, log_dir):
    """The ``.txnindex`` here is the broker's own (``storage/txn_index.py``),
    written as the aborts were appended, not packed by the test."""
    log = Log.open(os.path.join(log_dir, "btx-0"), "btx", 0, LogConfig(), clean_shutdown=True)

    def batch(*values: bytes, pid: int = -1) -> bytes:
        now = int(time.time() * 1000)  # the markers' time too: no roll between them
        return encode_batch([Record(i, now, None, v) for i, v in enumerate(values)], producer_id=pid,
                            producer_epoch=0 if pid >= 0 else -1, base_sequence=0 if pid >= 0 else -1,
                            transactional=pid >= 0)

    for chunk in (batch(b"a"), batch(b"x1", b"x2", pid=5), batch(b"y1", pid=6),
                  encode_control_batch(ABORT, producer_id=5, producer_epoch=0, coordinator_epoch=0),
                  encode_control_batch(COMMIT, producer_id=6, producer_epoch=0, coordinator_epoch=0), batch(b"b")):
        log.append(chunk, origin=ORIGIN_COORDINATOR)
    log.close()
    assert os.path.exists(os.path.join(log_dir, "btx-0", "00000000000000000000.txnindex"))
    reader = spark.read.format("hpbroker").option("topic", "btx")
    committed = reader.option("isolation", "read_committed").load(log_dir).orderBy("offset").collect()
    assert [bytes(r.value) for r in committed] == [b"a", b"y1", b"b"]
    everything = spark.read.format("hpbroker").option("topic", "btx").load(log_dir).orderBy("offset").collect()
    assert [bytes(r.value) for r in everything] == [b"a", b"x1", b"x2", b"y1", b"b"]


def test_read_committed_over_transactions_a_running_broker_wrote(spark, tmp_path):
    """A real transactional producer against a real broker: committed,
    aborted, committed again, its offsets committed in a transaction too.
    Spark reads the broker's segment directories with read_committed: the
    committed records only, and the offsets the markers and the aborted
    records take are gaps, not lost data (``failOnDataLoss`` stays true)."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic

    from harness.broker import Broker

    broker = Broker(tmp_path / "data", tmp_path / "broker.log").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # kept: its futures need it alive
        admin.create_topics([NewTopic("orders", 2, 1)])["orders"].result(30)
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "spark-writer"})
        p.init_transactions(30)
        for kind, count in (("committed", 8), ("aborted", 6), ("again", 4)):
            p.begin_transaction()
            for n in range(count):
                p.produce("orders", b"%s-%d" % (kind.encode(), n), partition=n % 2)
            if kind == "aborted":
                p.flush(30)
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
    finally:
        broker.stop()
    reader = spark.read.format("hpbroker").option("topic", "orders").option("failOnDataLoss", "true")
    committed = reader.option("isolation", "read_committed").load(str(tmp_path / "data")).collect()
    assert sorted(bytes(r.value) for r in committed) == sorted(
        [b"committed-%d" % n for n in range(8)] + [b"again-%d" % n for n in range(4)])
    everything = spark.read.format("hpbroker").option("topic", "orders").load(str(tmp_path / "data")).collect()
    assert len(everything) == 18  # read_uncommitted: the aborted records too, never a marker
