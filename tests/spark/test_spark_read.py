"""Batch reads through Spark (local[2]): the rows equal the record-by-record model."""

import os

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
