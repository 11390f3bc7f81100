"""Batches of a segment -> ``pyarrow.RecordBatch`` in the schema of ``schema.py``.

The common path (record batch v2) has no per-record Python: per chunk of
batches it decompresses each compressed batch's body (one call per batch),
runs the record-decode kernel over all of them at once, masks the records
outside ``[start, end)`` with numpy, and copies keys, values and headers into
Arrow buffers with ``gather``.  Uncompressed bodies are decoded straight from
the mapped segment; compressed ones from one buffer their bodies are
concatenated into.

Not rows: control batches (transaction markers) and, when the caller passes
them, aborted transactional batches; both still use up offsets.  Legacy
messages (magic 0/1, data written by Kafka before 0.11) go through the record
codec in Python: correct, but slow, and rare.

Timestamps: LogAppendTime batches give every record the batch's
maxTimestamp (as Kafka's consumers read it); ``timestampType`` is 1 there, 0
for CreateTime, -1 for magic 0 messages, which have no timestamp (-1 ms, as
Spark's Kafka source shows it).
"""

import numpy as np
import pyarrow as pa

from hpbroker.kernels import decode_records, layout
from hpbroker.records import CorruptRecordError, decompress, legacy
from hpbroker.spark import gather
from hpbroker.spark.schema import ARROW_HEADER_TYPE, ARROW_HEADERS_TYPE, ARROW_SCHEMA, ARROW_TIMESTAMP_TYPE

BATCH_FIELDS = ("position", "size", "base_offset", "last_offset", "max_timestamp", "base_timestamp",
                "record_count", "attributes", "magic", "producer_id")


def select(scan, mask) -> dict:
    """The columns of a ``BatchScan`` this module uses, restricted to ``mask``."""
    return {name: getattr(scan, name)[mask] for name in BATCH_FIELDS}


def chunk_to_arrow(view: np.ndarray, batches: dict, start: int, end: int, topic: str,
                   partition: int) -> list[pa.RecordBatch]:
    """The rows of ``batches`` (all from ``view``) with offsets in ``[start, end)``."""
    keep = (batches["attributes"] & layout.CONTROL_BIT) == 0
    if not keep.all():
        batches = {k: v[keep] for k, v in batches.items()}
    if len(batches["position"]) == 0:
        return []
    is_v2 = batches["magic"] == 2
    if is_v2.all():
        return _v2_to_arrow(view, batches, start, end, topic, partition)
    # Keep log order across a switch of format (a topic upgraded in place).
    out = []
    change = np.flatnonzero(np.diff(is_v2.astype(np.int8))) + 1
    for lo, hi in zip(np.r_[0, change], np.r_[change, len(is_v2)]):
        run = {k: v[lo:hi] for k, v in batches.items()}
        if is_v2[lo]:
            out += _v2_to_arrow(view, run, start, end, topic, partition)
        else:
            out += _legacy_to_arrow(view, run, start, end, topic, partition)
    return out


def _bodies(view, batches):
    """(buffer, starts, ends) of the record bodies, decompressing where needed."""
    body_start = batches["position"] + layout.RECORDS
    body_end = batches["position"] + batches["size"]
    codec = batches["attributes"] & layout.COMPRESSION_MASK
    if not codec.any():
        return view, body_start, body_end
    parts = []
    for s, e, c in zip(body_start.tolist(), body_end.tolist(), codec.tolist()):
        raw = view[s:e]
        parts.append(decompress(c, raw) if c else raw)
    lengths = np.fromiter((len(p) for p in parts), np.int64, len(parts))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    # One pool buffer rather than b"".join: its pages are warm from the last chunk.
    _, buf = gather.pool_array(int(ends[-1]), np.uint8)
    for part, s, e in zip(parts, starts.tolist(), ends.tolist()):
        buf[s:e] = np.frombuffer(part, np.uint8)
    return buf, starts, ends


def _v2_to_arrow(view, batches, start, end, topic, partition):
    buf, starts, ends = _bodies(view, batches)
    attributes = batches["attributes"]
    log_append = (attributes & layout.TIMESTAMP_TYPE_BIT) != 0
    append_times = np.where(log_append, batches["max_timestamp"], -1)
    rec = decode_records(buf, starts, ends, batches["base_offset"], batches["base_timestamp"],
                         batches["record_count"], append_times)
    if rec.error_batch >= 0:
        bad = rec.error_batch
        raise CorruptRecordError(
            f"{topic}-{partition}: malformed records in the batch at offset {int(batches['base_offset'][bad])} "
            f"(byte {int(batches['position'][bad])}) though its CRC is valid")
    ts_type = np.repeat(log_append.astype(np.int32), np.diff(rec.batch_first))
    offset = rec.offset
    rows = np.flatnonzero((offset >= start) & (offset < end))
    if len(rows) == len(offset):
        rows = None  # all records kept: skip the fancy indexing
    return _build(buf, rec, rows, ts_type, topic, partition)


def _take(column, rows):
    return column if rows is None else column[rows]


def _build(buf, rec, rows, ts_type, topic, partition):
    offset = _take(rec.offset, rows)
    n = len(offset)
    if n == 0:
        return []
    key_start, key_length = _take(rec.key_start, rows), _take(rec.key_length, rows)
    value_start, value_length = _take(rec.value_start, rows), _take(rec.value_length, rows)
    if gather.total_bytes(value_length) + gather.total_bytes(key_length) > gather.INT32_MAX // 2:
        # Split before an int32 offset overflows; the halves are built the same way.
        rows = np.arange(len(rec.offset)) if rows is None else rows
        half = len(rows) // 2
        return (_build(buf, rec, rows[:half], ts_type, topic, partition)
                + _build(buf, rec, rows[half:], ts_type, topic, partition))
    ts_buf, timestamp_us = gather.pool_array(n, np.int64)
    np.multiply(_take(rec.timestamp, rows), 1000, out=timestamp_us)
    columns = [
        gather.binary_array(buf, key_start, key_length),
        gather.binary_array(buf, value_start, value_length),
        gather.repeated_string(topic, n),
        pa.array(np.full(n, partition, np.int32)),
        pa.array(offset),
        pa.Array.from_buffers(ARROW_TIMESTAMP_TYPE, n, [None, ts_buf], 0),
        pa.array(_take(ts_type, rows)),
        _headers(buf, rec, rows),
    ]
    return [pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)]


def _headers(buf, rec, rows):
    counts = _take(rec.header_count, rows)
    n = len(counts)
    if not counts.any():
        return pa.nulls(n, ARROW_HEADERS_TYPE)
    offsets = gather.list_offsets(counts)
    total = int(offsets[-1])
    if rows is None:
        hrows = np.arange(total)
    else:  # the header rows of the kept records, as one arange shifted per record
        hrows = np.repeat(rec.header_first[rows] - offsets[:-1], counts) + np.arange(total)
    keys = gather.binary_array(buf, rec.header_key_start[hrows], rec.header_key_length[hrows], pa.string())
    values = gather.binary_array(buf, rec.header_value_start[hrows], rec.header_value_length[hrows])
    structs = pa.StructArray.from_arrays([keys, values], fields=list(ARROW_HEADER_TYPE))
    valid = counts > 0  # Spark's Kafka source gives null, not [], for no headers
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(ARROW_HEADERS_TYPE, n, [bitmap, pa.py_buffer(offsets.astype(np.int32))],
                                 n - int(valid.sum()), children=[structs])


def _legacy_to_arrow(view, batches, start, end, topic, partition):
    rows = {name: [] for name in ("key", "value", "offset", "timestamp", "timestampType")}
    for pos, size, magic, attributes in zip(batches["position"].tolist(), batches["size"].tolist(),
                                            batches["magic"].tolist(), batches["attributes"].tolist()):
        ts_type = -1 if magic == 0 else (1 if attributes & layout.LEGACY_TIMESTAMP_TYPE_BIT else 0)
        for r in legacy.decode_message_set(view[pos:pos + size].tobytes()):
            if start <= r.offset < end:
                rows["key"].append(r.key)
                rows["value"].append(r.value)
                rows["offset"].append(r.offset)
                rows["timestamp"].append(r.timestamp * 1000)
                rows["timestampType"].append(ts_type)
    n = len(rows["offset"])
    if n == 0:
        return []
    columns = [
        pa.array(rows["key"], pa.binary()), pa.array(rows["value"], pa.binary()),
        gather.repeated_string(topic, n), pa.array(np.full(n, partition, np.int32)),
        pa.array(rows["offset"], pa.int64()), pa.array(rows["timestamp"], pa.int64()).cast(ARROW_TIMESTAMP_TYPE),
        pa.array(rows["timestampType"], pa.int32()), pa.nulls(n, ARROW_HEADERS_TYPE),
    ]
    return [pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)]
