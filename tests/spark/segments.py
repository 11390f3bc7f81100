"""Writing Kafka log directories for the Spark tests, byte for byte, without a broker.

Segments are built with the record codec; ``.index`` entries follow Kafka's
rule (one after more than 4096 bytes, holding the batch's last offset and its
position); ``.txnindex`` entries are packed here with ``struct`` so the reader's
numpy layout is checked against an independent statement of Kafka's format.
"""

import os
import struct

from hpbroker.kernels import layout
from hpbroker.records import Header, Record, encode_batch, encode_control_batch
from hpbroker.records.control import ABORT, COMMIT
from hpbroker.storage import checkpoints, filenames

T0 = 1_700_000_000_000
TXN_ENTRY = struct.Struct(">hqqqq")  # version, producerId, firstOffset, lastOffset, lastStableOffset


def records(first: int, count: int, *, value_size: int = 20, tag: str = "v", headers=False, step_ms: int = 1):
    out = []
    for o in range(first, first + count):
        hs = (Header(b"h", f"{o}".encode()), Header(b"n", None)) if headers and o % 2 else ()
        key = None if o % 7 == 3 else f"k{o}".encode()
        value = None if o % 11 == 5 else (f"{tag}{o}:".encode() * value_size)[:value_size]
        out.append(Record(o, T0 + o * step_ms, key, value, hs))
    return out


class PartitionWriter:
    """Appends batches to ``<log_dir>/<topic>-<p>/`` segments, as a broker would lay them out."""

    def __init__(self, log_dir: str, topic: str, partition: int):
        self.path = os.path.join(log_dir, f"{topic}-{partition}")
        os.makedirs(self.path, exist_ok=True)
        self.next_offset = 0
        self.base = 0  # the open segment's base offset (roll() sets it)
        self._since_index = 0
        self.roll()

    def _file(self, suffix):
        return filenames.segment_file(self.path, self.base, suffix)

    def roll(self) -> None:
        self.base = self.next_offset
        open(self._file(".log"), "ab").close()
        open(self._file(".index"), "ab").close()
        self._since_index = 0

    def append_raw(self, data: bytes, last_offset: int) -> None:
        log = self._file(".log")
        position = os.path.getsize(log)
        with open(log, "ab") as f:
            f.write(data)
        if self._since_index > 4096:
            with open(self._file(".index"), "ab") as f:
                f.write(struct.pack(">ii", last_offset - self.base, position))
            self._since_index = 0
        self._since_index += len(data)
        self.next_offset = last_offset + 1

    def append(self, recs, **kw) -> tuple[int, int]:
        """One batch of ``recs`` (their offsets are rewritten from next_offset); returns (first, last)."""
        first = self.next_offset
        recs = [Record(first + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(recs)]
        self.append_raw(encode_batch(recs, base_offset=first, **kw), recs[-1].offset)
        return first, recs[-1].offset

    def append_values(self, count: int, **kw) -> tuple[int, int]:
        own = {k: kw.pop(k) for k in list(kw) if k in ("value_size", "tag", "headers")}
        return self.append(records(self.next_offset, count, **own), **kw)

    def marker(self, kind: int, producer_id: int, epoch: int = 0) -> int:
        offset = self.next_offset
        self.append_raw(encode_control_batch(kind, producer_id=producer_id, producer_epoch=epoch,
                                             coordinator_epoch=0, base_offset=offset, timestamp=T0), offset)
        return offset

    def txnindex(self, entries) -> None:
        """Kafka's .txnindex of the current segment: (producerId, firstOffset, lastOffset) rows."""
        with open(self._file(".txnindex"), "ab") as f:
            for pid, first, last in entries:
                f.write(TXN_ENTRY.pack(0, pid, first, last, first))


def write_checkpoint(log_dir: str, name: str, offsets: dict) -> None:
    checkpoints.write_offset_checkpoint(os.path.join(log_dir, name), offsets)


RECOVERY = filenames.RECOVERY_POINT_CHECKPOINT
HIGH_WATERMARK = filenames.REPLICATION_OFFSET_CHECKPOINT
LOG_START = filenames.LOG_START_OFFSET_CHECKPOINT
CODECS = {name: i for i, name in enumerate(layout.CODEC_NAMES)}
__all__ = ["ABORT", "COMMIT", "CODECS", "PartitionWriter", "records", "write_checkpoint"]
