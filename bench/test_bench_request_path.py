"""What a small request costs a worker between its bytes and its answer's,
without the socket: the part of the per-request figure in
``bench/request_cost.py`` that is our Python, steadier than a whole run.

    .venv/bin/python -m pytest bench/test_bench_request_path.py --benchmark-only

One standalone worker in process (the handler tests' ``Harness``), each
request decoded, handled and its answer encoded as ``KafkaConnection``
does: a Produce v9 of one 100 B record (routed to the owner, appended,
published to the shared table), measured in the same rounds as
``Log.append`` of the same batch alone; and a ListOffsets v7 "latest",
answered from the shared table. ``extra_info``: µs per request, medians of
interleaved rounds.
"""

import datetime
import time

import pytest
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData

from hpbroker.protocol import client_codec
from hpbroker.protocol.codec import decode_request, encode_response
from hpbroker.records import Record, encode_batch
from hpbroker.workers.handlers import ROUTES
from hpbroker.workers.kio_build import make
from tests.handlers.conftest import Harness, request

ROUNDS, CALLS = 7, 2000
TOPIC = "bench"


@pytest.fixture
def harness(tmp_path):
    made = Harness(str(tmp_path))
    made.run(made.call(request(19, 7, topics=[{"name": TOPIC, "num_partitions": 1, "replication_factor": 1}])))
    yield made
    made.close()


def _frame(req, correlation_id: int = 1) -> memoryview:
    return memoryview(client_codec.encode_request(req, correlation_id, "bench"))[4:]


def _requests_us(harness: Harness, frame: memoryview) -> float:
    async def loop() -> float:
        started = time.perf_counter()
        for _ in range(CALLS):
            header, decoded = decode_request(frame)
            answer = await ROUTES[header.api_key](harness.ctx, header, decoded)
            if not isinstance(answer, list):  # a kio response: the connection encodes it
                encode_response(header, answer)
        return (time.perf_counter() - started) / CALLS * 1e6
    return harness.run(loop())


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def test_a_one_record_produce_against_its_append_alone(benchmark, harness):
    batch = encode_batch([Record(0, 0, None, b"x" * 100)])
    produce = _frame(make(ProduceRequest, transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=30),
                          topic_data=(make(TopicProduceData, name=TOPIC, partition_data=(
                              make(PartitionProduceData, index=0, records=batch),)),)))
    log = harness.partitions.log_of(TOPIC, 0)
    assert log is not None

    def append_alone() -> float:
        started = time.perf_counter()
        for _ in range(CALLS):
            log.append(bytearray(batch))
        return (time.perf_counter() - started) / CALLS * 1e6

    paths, appends = [], []
    for _ in range(ROUNDS):
        paths.append(_requests_us(harness, produce))
        appends.append(append_alone())
    benchmark.pedantic(lambda: _requests_us(harness, produce), rounds=3)
    benchmark.extra_info.update(produce_us=round(_median(paths), 1), log_append_us=round(_median(appends), 1))
    assert log.log_end_offset == (2 * ROUNDS + 3) * CALLS


def test_list_offsets_latest_from_the_shared_table(benchmark, harness):
    list_offsets = _frame(request(2, 7, topics=[{"name": TOPIC, "partitions": [
        {"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]}]))
    answers = [_requests_us(harness, list_offsets) for _ in range(ROUNDS)]
    benchmark.pedantic(lambda: _requests_us(harness, list_offsets), rounds=3)
    benchmark.extra_info.update(list_offsets_us=round(_median(answers), 1))
    header, decoded = decode_request(list_offsets)
    pieces = harness.run(ROUTES[2](harness.ctx, header, decoded))
    _, answer = client_codec.decode_response(2, 7, b"".join(pieces)[4:])
    [partition] = answer.topics[0].partitions
    assert (partition.error_code, partition.offset) == (0, 0)  # answered, from the table, for the empty log
