"""Building batches and reading a log back, for the storage tests."""

from hpbroker.kernels import layout
from hpbroker.records import Record, decode_batch, encode_batch


def make_batch(count: int, *, timestamp: int = 1_700_000_000_000, value_size: int = 20, codec: int = 0, tag: str = "r",
               step_ms: int = 1) -> bytes:
    records = [
        Record(offset=i, timestamp=timestamp + i * step_ms, key=f"{tag}{i}".encode(),
               value=(f"{tag}{i}:".encode() * value_size)[:value_size])
        for i in range(count)
    ]
    return encode_batch(records, compression=codec)


def batches_in(data: bytes):
    """Decode back-to-back batches; fails on a partial one."""
    pos = 0
    out = []
    while pos < len(data):
        batch = decode_batch(data, pos)
        out.append(batch)
        pos += batch.header.size
    assert pos == len(data), "a read must return whole batches"
    return out


def read_all(log, start=None):
    """Every record from ``start`` (default: the log start) to the written offset."""
    offset = log.log_start_offset if start is None else start
    records = []
    while offset < log.written_offset:
        data = log.read_records(offset, 1 << 16)
        assert data, f"nothing returned at {offset} below {log.written_offset}"
        for batch in batches_in(data):
            records.extend(r for r in batch.records if r.offset >= offset)
        offset = records[-1].offset + 1
    return records


HEADER = layout.BATCH_HEADER_SIZE
