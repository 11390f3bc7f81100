"""What checking a request before kio's native decoder costs, measured in the
same run as the decoder alone.

    .venv/bin/python -m pytest bench/test_bench_protocol.py --benchmark-only

* Produce v9 with 16 partitions of one 10-record batch each (the shape of a
  busy librdkafka producer's request): the bounds check alone, against kio's
  native decode of the same bytes.
* ``extra_info``: microseconds per request of each, and their ratio, as
  medians of interleaved rounds (both sides see the same machine noise).
"""

import dataclasses
import io
import struct
import time

from kio.serial import entity_reader, entity_writer

from harness.request_samples import request_schema, sample_entity
from hpbroker.protocol import decode_request
from hpbroker.protocol.bounds import check_body
from hpbroker.protocol.header import parse_request_header
from hpbroker.records import Record, encode_batch

ROUNDS, CALLS = 9, 2000


def _produce_frame(partitions: int = 16) -> bytes:
    schema = request_schema(0, 9)
    sample = sample_entity(schema)
    batch = encode_batch([Record(i, 0, None, b"x" * 100) for i in range(10)])
    topic = sample.topic_data[0]
    parts = tuple(dataclasses.replace(topic.partition_data[0], index=i, records=batch) for i in range(partitions))
    request = dataclasses.replace(sample, transactional_id=None,
                                  topic_data=(dataclasses.replace(topic, partition_data=parts),))
    body = io.BytesIO()
    entity_writer(schema)(body, request)
    header = struct.pack(">hhih", 0, 9, 1, 5) + b"bench" + b"\x00"  # request header v2, no tags
    return header + body.getvalue()


def _per_call_us(run) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        run()
    return (time.perf_counter() - started) / CALLS * 1e6


def test_bounds_check_against_native_decode(benchmark):
    frame = _produce_frame()
    _header, offset = parse_request_header(frame, 2)
    schema = request_schema(0, 9)
    read = entity_reader(schema)
    assert check_body(schema, frame, offset) == []
    assert decode_request(frame)[1] == read(frame, offset)[0]

    def native():
        read(frame, offset)

    def check():
        check_body(schema, frame, offset)

    checks, natives = [], []
    for _ in range(ROUNDS):
        natives.append(_per_call_us(native))
        checks.append(_per_call_us(check))
    benchmark(check)
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    ratios = sorted(c / n for c, n in zip(checks, natives))
    benchmark.extra_info.update(request_bytes=len(frame), native_decode_us=round(median(natives), 2),
                                check_us=round(median(checks), 2), check_over_native=round(ratios[len(ratios) // 2], 2))
