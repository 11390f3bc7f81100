"""AddPartitionsToTxn (24): a transactional producer names the partitions it
is about to write before its first produce to each; its coordinator writes
them into the ongoing transaction.  v0-v3 (what clients send) carry one
transaction.  Partitions of unknown topics are answered
UNKNOWN_TOPIC_OR_PARTITION and the rest OPERATION_NOT_ATTEMPTED, as Kafka
does: nothing is added unless everything can be.  v4 is what one broker
sends another: several transactions in one request, for a produce's
verification (KIP-890) with ``verify_only``."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.per_partition import denied_topics
from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import AddTxnPartitions

API_KEY = 24


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    if hasattr(request, "transactions"):  # v4+: another broker's batch (a produce's verification)
        return await _batched(ctx, m, request)
    wanted = [(t.name, int(p)) for t in request.v3_and_below_topics for p in t.partitions]
    errors: dict[tuple[str, int], ErrorCode] = {}
    denied = denied_topics(ctx, Operation.WRITE, wanted)
    unknown = {(t, p) for t, p in wanted if (info := ctx.topics.get(t)) is None or not 0 <= p < info.partitions}
    if denied:  # Kafka's answer: the denied ones said, the others not attempted
        errors = {(t, p): ErrorCode.topic_authorization_failed if t in denied else ErrorCode.operation_not_attempted
                  for t, p in wanted}
    elif unknown:
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


async def _batched(ctx, m, request):
    """v4+: several transactions, each added to or (``verify_only``) checked against."""
    results = []
    for txn in request.transactions:
        partitions = [(t.name, int(p)) for t in txn.topics for p in t.partitions]
        answer = await ctx.owners.ask(AddTxnPartitions(txn.transactional_id, txn.producer_id, txn.producer_epoch,
                                                       partitions, verify_only=bool(txn.verify_only)))
        errors = {(r.topic, r.partition): r.error for r in answer.partitions}
        results.append(make(m.AddPartitionsToTxnResult, transactional_id=txn.transactional_id, topic_results=tuple(
            make(m.AddPartitionsToTxnTopicResult, name=t.name, results_by_partition=tuple(
                make(m.AddPartitionsToTxnPartitionResult, partition_index=p,
                     partition_error_code=errors.get((t.name, int(p)), answer.error)) for p in t.partitions))
            for t in txn.topics)))
    return make(m.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                results_by_transaction=tuple(results))
