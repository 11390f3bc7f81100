"""WriteTxnMarkers (27): a transaction coordinator on another broker sends the
COMMIT or ABORT markers of a transaction for the partitions this broker
leads.  Each is written by its partition's owning worker and answered once
replicated, as Kafka writes markers (acks=all)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import make, response_module
from hpbroker.workers.owner_calls import WriteMarker
from hpbroker.workers.transactions.markers import write_here

API_KEY = 27


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    answers = []
    for marker in request.markers:
        calls, errors = [], {}
        for topic in marker.topics:
            info = ctx.topics.get(topic.name)
            for p in topic.partition_indexes:
                if info is None or not 0 <= p < info.partitions:
                    errors[(topic.name, int(p))] = ErrorCode.unknown_topic_or_partition
                else:
                    calls.append(WriteMarker(topic.name, int(p), marker.producer_id, marker.producer_epoch,
                                             marker.coordinator_epoch, bool(marker.transaction_result)))
        for call, error in zip(calls, await write_here(ctx.owners, calls)):
            errors[(call.topic, call.partition)] = error
        answers.append(make(m.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(
            make(m.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                make(m.WritableTxnMarkerPartitionResult, partition_index=p, error_code=errors[(t.name, int(p))])
                for p in t.partition_indexes)) for t in marker.topics)))
    return make(m.WriteTxnMarkersResponse, markers=tuple(answers))
