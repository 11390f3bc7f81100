"""AddPartitionsToTxn (24): a transactional producer names the partitions it
is about to write before its first produce to each; its coordinator writes
them into the ongoing transaction.  v0-v3 (what clients send) carry one
transaction.  Partitions of unknown topics are answered
UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED, as Kafka
does: nothing is added unless everything can be."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import AddTxnPartitions

API_KEY = 24


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    unknown = {(t, p) for t, p in wanted if (info := ctx.topics.get(t)) is None or not 0 <= p < info.partitions}
    if unknown:
        errors = {tp: ErrorCode.unknown_topic_or_partition if tp in unknown else ErrorCode.operation_not_attempted
                  for tp in wanted}
    else:
        added = await ctx.owners.ask(AddTxnPartitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted))
        errors = {(r.topic, r.partition): for_version(r.error, API_KEY, header.api_version)
                  for r in added.partitions}
    return make(m.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
        make(m.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
            make(m.AddPartitionsToTxnPartitionResult, partition_index=p,
                 partition_error_code=errors.get((t.name, int(p)), ErrorCode.none)) for p in t.partitions))
        for t in request.v3_and_below_topics))
