"""A client connection follows its partitions to the worker that owns them
(``workers/affinity.py``), and loses nothing on the way: the stream goes on
where it was (answers in order, the next request read by the new worker),
every record lands once, and a worker killed while connections move costs
no acknowledged record."""

import asyncio
import datetime

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kio.schema.produce.v9.request import PartitionProduceData, ProduceRequest, TopicProduceData
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from harness.broker import free_port
from harness.waiting import wait_for
from hpbroker.errors import ErrorCode
from hpbroker.records import Record, encode_batch
from hpbroker.replication.client import ClientConnection
from hpbroker.server.ownership import partition_owner
from hpbroker.workers.kio_build import make
from tests.integration.clients import ck_consume, ck_consume_all, kp_consume, topic_name
from tests.integration.test_metrics import scrape_when, value
from tests.integration.worker_kills import assert_acknowledged_once, produce_through_worker_kills

MOVE_AFTER = 8  # connection.move.after.requests, the default


def _create(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(30)


def _produce_request(topic: str, value: bytes) -> ProduceRequest:
    batch = encode_batch([Record(0, 0, None, value)])
    return make(ProduceRequest, transactional_id=None, acks=i16(1), timeout=i32Timedelta.parse(
        datetime.timedelta(seconds=30)), topic_data=(make(TopicProduceData, name=TopicName(topic), partition_data=(
            make(PartitionProduceData, index=i32(0), records=batch),)),))


@pytest.mark.parametrize("flush", [None, "1"], ids=["answered-at-once", "owed-until-fsynced"])
def test_connections_move_to_the_owner_of_their_partition_and_keep_their_stream(broker_factory, flush):
    """Four connections opened together land on both workers; producing one
    record per request to one partition, those on the other worker move to
    its owner after MOVE_AFTER requests, mid-stream: every answer comes back
    in order with the next offset, and both clients read back each record once.
    So do connections whose every answer is owed (here until its group
    commit's fsync): they move between requests, once their answers are out."""
    port = free_port()
    settings = {"metrics.listen": f"127.0.0.1:{port}"}
    if flush is not None:
        settings["log.flush.interval.messages"] = flush
    broker = broker_factory(settings, num_workers=2)
    topic = topic_name("moves")
    _create(broker.bootstrap, topic, 1)
    owner = partition_owner(topic, 0, 2)
    rounds = 4 * MOVE_AFTER

    async def produce() -> tuple[list, list, list]:
        conns = [await ClientConnection.open(broker.host, broker.port, f"mover-{i}") for i in range(4)]
        ports = [c.get_extra_info("sockname")[1] for c in conns]
        before = [broker.worker_serving(p) for p in ports]
        offsets: list[list[int]] = [[] for _ in conns]
        for round_ in range(rounds):
            answers = await asyncio.gather(*(c.send(_produce_request(topic, b"%d-%d" % (i, round_)))
                                             for i, c in enumerate(conns)))
            for i, answer in enumerate(answers):
                part = answer.responses[0].partition_responses[0]
                assert part.error_code == ErrorCode.none
                offsets[i].append(part.base_offset)
        after = [broker.worker_serving(p) for p in ports]
        for c in conns:
            c.close()
        return before, after, offsets

    before, after, offsets = asyncio.run(produce())
    assert set(before) == {0, 1}, "the acceptor spread the connections over both workers"
    assert after == [owner] * 4, "every connection ended on the partition's owner"
    for mine in offsets:
        assert mine == sorted(mine) and len(set(mine)) == rounds  # answered in order, each appended once
    assert sorted(o for mine in offsets for o in mine) == list(range(4 * rounds))

    moved = before.count(1 - owner)
    samples = wait_for(lambda: scrape_when(port, lambda s: value(s, "hpbroker_connections_moved_total") >= moved),
                       timeout=30, what="the moves counted")
    assert value(samples, "hpbroker_connections_moved_total") == moved
    sent = sorted(b"%d-%d" % (i, r) for i in range(4) for r in range(rounds))
    assert sorted(r.value or b"" for r in ck_consume(broker.bootstrap, topic, [0], len(sent))) == sent
    assert sorted(r.value or b"" for r in kp_consume(broker.bootstrap, topic, [0], len(sent))) == sent


def test_moving_connections_lose_no_acknowledged_record_when_workers_are_killed(broker_factory):
    """librdkafka and kafka-python, both idempotent and one record per request,
    produce to one partition each (of different workers) while first one
    worker and then the other is SIGKILLed: every record either client had
    acknowledged is in the log, and none twice."""
    broker = broker_factory({}, num_workers=2)
    topic = topic_name("moves-kill")
    _create(broker.bootstrap, topic, 2)
    assert {partition_owner(topic, p, 2) for p in (0, 1)} == {0, 1}
    total = 3000
    # paced a little, so that the kills land among the requests
    acked = produce_through_worker_kills(broker, topic, total, lambda client, i: b"%s-%d" % (client.encode(), i),
                                         lambda client, _: 0 if client == "ck" else 1,
                                         linger_ms=0, pace_every=5, pace_s=0.001)
    assert len(acked["ck"]) > total // 2 and len(acked["kp"]) > total // 2, "both got most records through"
    values = [r.value or b"" for r in ck_consume_all(broker.bootstrap, topic, [0, 1])]
    assert_acknowledged_once(values, acked["ck"] | acked["kp"])
