"""Streaming: micro-batches capped by maxRecordsPerTrigger, a restart from the checkpoint reads nothing twice."""

from tests.spark.segments import PartitionWriter


def run_available_now(spark, log_dir, checkpoint, out, **options):
    stream = spark.readStream.format("hpbroker").option("subscribe", "s").option("startingOffsets", "earliest")
    for k, v in options.items():
        stream = stream.option(k, v)
    query = (stream.load(log_dir).select("partition", "offset", "value").writeStream.format("parquet")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start(out))
    query.awaitTermination(120)
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def test_restart_reads_only_new_records(spark, log_dir, tmp_path):
    writers = [PartitionWriter(log_dir, "s", p) for p in range(2)]
    for w in writers:
        for _ in range(3):
            w.append_values(10)
    checkpoint, out = str(tmp_path / "ck"), str(tmp_path / "out")
    progress = run_available_now(spark, log_dir, checkpoint, out, maxRecordsPerTrigger="25")
    assert [p["numInputRows"] for p in progress] == [24, 24, 12]
    for w in writers:
        w.roll()
        w.append_values(7)
    PartitionWriter(log_dir, "s", 2).append_values(4)  # a partition that appears later
    progress = run_available_now(spark, log_dir, checkpoint, out)
    assert sum(p["numInputRows"] for p in progress) == 18
    rows = spark.read.parquet(out).collect()
    seen = sorted((r.partition, r.offset) for r in rows)
    assert seen == sorted([(p, o) for p in range(2) for o in range(37)] + [(2, o) for o in range(4)])
