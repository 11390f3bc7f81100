"""The expected rows of a log directory, decoded record by record with the record codec.

An independent, slow reading of the same files: every batch through
``records.decode_batch``, control batches dropped, aborted batches dropped
when given, offsets filtered to a range.
"""

import glob
import os

from hpbroker.kernels import layout
from hpbroker.records import decode_batch, iter_batches


def expected_rows(partition_path: str, topic: str, partition: int, start=0, end=None, aborted=(), torn_ok=True):
    rows = []
    for log in sorted(glob.glob(os.path.join(partition_path, "*.log"))):
        data = open(log, "rb").read()
        pos = 0
        while pos < len(data):
            try:
                batch = decode_batch(data, pos)
            except Exception:
                if torn_ok:
                    break
                raise
            pos += batch.header.size
            h = batch.header
            if h.is_control:
                continue
            if h.is_transactional and any(pid == h.producer_id and first <= h.base_offset <= last
                                          for pid, first, last in aborted):
                continue
            for r in batch.records:
                if r.offset < start or (end is not None and r.offset >= end):
                    continue
                headers = [{"key": x.key.decode(), "value": x.value} for x in r.headers] or None
                rows.append({"key": r.key, "value": r.value, "topic": topic, "partition": partition,
                             "offset": r.offset, "timestamp_ms": r.timestamp,
                             "timestampType": int(h.timestamp_type), "headers": headers})
    return rows


def normalise(rows):
    """Arrow pylist rows (aware timestamps) or Spark rows read through ``spark_rows`` -> the model's dicts."""
    out = []
    for r in rows:
        d = r.asDict(recursive=True) if hasattr(r, "asDict") else dict(r)
        if "timestamp" in d:
            d["timestamp_ms"] = round(d.pop("timestamp").timestamp() * 1000)
        if d["headers"] is not None:
            d["headers"] = [dict(h) for h in d["headers"]]
        out.append(d)
    return sorted(out, key=lambda d: (d["topic"], d["partition"], d["offset"]))


def spark_rows(df):
    """Collect with the timestamp as epoch milliseconds (no time-zone guessing)."""
    from pyspark.sql import functions as F
    return normalise(df.withColumn("timestamp_ms", F.unix_millis("timestamp")).drop("timestamp").collect())


CONTROL = layout.CONTROL_BIT
__all__ = ["expected_rows", "normalise", "iter_batches"]
