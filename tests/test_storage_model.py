"""Random sequences of append / roll / read / retention / crash / recover, checked
against a plain list of the records that must be there."""

import os
import shutil
import struct
import tempfile

from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from hpbroker.kernels import layout
from hpbroker.records import Record, encode_batch
from hpbroker.storage import Log, LogConfig
from tests.log_helpers import read_all

CODECS = st.sampled_from([layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4,
                          layout.CODEC_ZSTD])


class LogModel(RuleBasedStateMachine):
    @initialize(segment_bytes=st.integers(1000, 4000), interval=st.integers(0, 400))
    def open(self, segment_bytes, interval):
        self.tmp = tempfile.mkdtemp(prefix="hpbroker-model-")
        self.config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval, file_delete_delay_ms=0,
                                retention_ms=-1)
        self.log = Log.open(os.path.join(self.tmp, "m-0"), "m", 0, self.config)
        self.model: list[tuple[int, int, bytes | None, bytes | None]] = []  # offset, timestamp, key, value
        self.start = 0
        self.last_batch: tuple[int, int] | None = None  # base offset, size of the newest batch

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(count=st.integers(1, 6), value_size=st.integers(0, 120), ts_step=st.integers(-3, 50), codec=CODECS)
    def append(self, count, value_size, ts_step, codec):
        base_ts = 1_700_000_000_000 + len(self.model) * 10
        records = [
            Record(offset=i, timestamp=base_ts + i * ts_step, key=f"k{len(self.model) + i}".encode(),
                   value=os.urandom(value_size))
            for i in range(count)
        ]
        data = encode_batch(records, compression=codec)
        info = self.log.append(data)
        assert info.first_offset == len(self.model)
        self.last_batch = (info.first_offset, len(data))
        self.model.extend((info.first_offset + r.offset, r.timestamp, r.key, r.value) for r in records)

    @rule()
    def roll(self):
        self.log.roll()

    @rule(data=st.data(), max_bytes=st.integers(1, 2000))
    def read(self, data, max_bytes):
        if self.start >= len(self.model):
            return
        offset = data.draw(st.integers(self.start, len(self.model) - 1))
        found = self.log.read(offset, max_bytes)
        assert found is not None
        raw = found.tobytes()
        first_base = struct.unpack_from(">q", raw)[0]
        assert first_base <= offset
        assert found.size <= max_bytes or found.size == struct.unpack_from(">i", raw, 8)[0] + 12

    @rule(data=st.data())
    def delete_records(self, data):
        self.start = data.draw(st.integers(self.start, len(self.model)))
        self.log.delete_records_before(self.start)

    @rule(keep=st.integers(0, 4000))
    def size_retention(self, keep):
        import dataclasses

        self.log.config = dataclasses.replace(self.config, retention_bytes=keep)
        self.log.delete_old_segments()
        self.log.config = self.config
        self.start = max(self.start, self.log.log_start_offset)

    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        live = [m for m in self.model if m[0] >= self.start]
        if not live:
            return
        target = data.draw(st.sampled_from([m[1] for m in live])) + data.draw(st.integers(-2, 2))
        expected = next(((o, t) for o, t, _, _ in live if t >= target), None)
        assert self.log.offset_for_timestamp(target) == expected

    @rule(damage=st.sampled_from(["none", "torn", "garbage"]), flush_first=st.booleans())
    def crash_and_recover(self, damage, flush_first):
        if flush_first:
            self.log.flush()
        point = self.log.flushed_offset
        newest = max((s for s in self.log.segments if s.size), key=lambda s: s.base_offset, default=None)
        for segment in self.log.segments:
            segment.close()
        if newest is not None and damage != "none" and self.last_batch and self.last_batch[0] >= point:
            with open(newest.log_path, "r+b") as f:
                if damage == "torn":
                    f.truncate(newest.size - 1 - (self.last_batch[1] // 2))
                    del self.model[self.last_batch[0]:]
                else:
                    f.seek(0, os.SEEK_END)
                    f.write(os.urandom(37))
        self.log = Log.open(self.log.directory, "m", 0, self.config, recovery_point=point, log_start_offset=self.start)
        self.last_batch = None
        assert self.log.log_end_offset == len(self.model)
        self.start = min(self.start, len(self.model))

    @invariant()
    def offsets_are_ordered(self):
        log = self.log
        assert log.log_start_offset <= log.flushed_offset <= log.written_offset <= log.log_end_offset == len(self.model)

    @invariant()
    def every_live_record_reads_back(self):
        got = [(r.offset, r.timestamp, r.key, r.value)
               for r in read_all(self.log, max(self.start, self.log.log_start_offset))]
        assert got == [m for m in self.model if m[0] >= max(self.start, self.log.log_start_offset)]


LogModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_log_against_model = LogModel.TestCase
