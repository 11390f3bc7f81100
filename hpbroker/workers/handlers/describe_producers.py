"""DescribeProducers (61): each partition's active producers as its leader
keeps them (id, epoch, last sequence and timestamp, coordinator epoch, and the
first offset of its open transaction, -1 when none), what operators look at
to find a transaction that holds a partition's last stable offset back."""

from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import ask_each, by_topic, denied_topics
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import DescribeProducers

API_KEY = 61


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.name, partition) for t in request.topics for partition in t.partition_indexes]
    results = await ask_each(ctx, work, DescribeProducers, denied=denied_topics(ctx, Operation.READ, work))
    return make(m.DescribeProducersResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.TopicResponse, name=topic, partitions=tuple(
            make(m.PartitionResponse, partition_index=partition, error_code=r.error, active_producers=tuple(
                make(m.ProducerState, producer_id=pid, producer_epoch=epoch, last_sequence=sequence,
                     last_timestamp=timestamp, coordinator_epoch=coordinator_epoch, current_txn_start_offset=start)
                for pid, epoch, sequence, timestamp, coordinator_epoch, start in r.producers))
            for (_, partition), r in rows))
        for topic, rows in by_topic(work, results)))
