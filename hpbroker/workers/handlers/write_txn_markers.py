"""WriteTxnMarkers (27): a transaction coordinator on another broker sends the
COMMIT or ABORT markers of a transaction for the partitions this broker
leads.  Each is written by its partition's owning worker and answered once
replicated, as Kafka writes markers (acks=all); the wait for the replicas is
owed (``Later``), so the coordinator's next request is written meanwhile."""

from hpbroker.errors import ErrorCode
from hpbroker.protocol.codec import encode_response
from hpbroker.workers.context import Later
from hpbroker.workers.kio_build import make, response_module
from hpbroker.workers.owner_calls import WriteMarker
from hpbroker.workers.transactions.markers import replicated

API_KEY = 27


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    calls: list[WriteMarker] = []
    errors: dict[tuple[int, str, int], ErrorCode] = {}  # (producer id, topic, partition)
    for marker in request.markers:
        for topic in marker.topics:
            info = ctx.topics.get(topic.name)
            for p in topic.partition_indexes:
                if info is None or not 0 <= p < info.partitions:
                    errors[(marker.producer_id, topic.name, int(p))] = ErrorCode.unknown_topic_or_partition
                else:
                    calls.append(WriteMarker(topic.name, int(p), marker.producer_id, marker.producer_epoch,
                                             marker.coordinator_epoch, bool(marker.transaction_result)))
    written = await ctx.owners.ask_all(calls) if calls else []
    if any(r.error == ErrorCode.none and not r.replicated for r in written):
        # written: the wait for the replicas is owed, and the next request is handled meanwhile
        return Later(_answer_replicated(ctx, m, header, request, calls, written, errors))
    return _response(m, request, calls, [r.error for r in written], errors)


async def _answer_replicated(ctx, m, header, request, calls, written, errors) -> list[bytes]:
    return [encode_response(header, _response(m, request, calls, await replicated(ctx.owners, calls, written),
                                              errors))]


def _response(m, request, calls, call_errors, errors):
    for call, error in zip(calls, call_errors):
        errors[(call.producer_id, call.topic, call.partition)] = error
    return make(m.WriteTxnMarkersResponse, markers=tuple(
        make(m.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(
            make(m.WritableTxnMarkerTopicResult, name=t.name, partitions=tuple(
                make(m.WritableTxnMarkerPartitionResult, partition_index=p,
                     error_code=errors[(marker.producer_id, t.name, int(p))]) for p in t.partition_indexes))
            for t in marker.topics)) for marker in request.markers))
