"""TxnOffsetCommit (28): offsets committed inside a transaction, sent to the
group's coordinator after AddOffsetsToTxn; visible to the group only once
the transaction commits.  v3+ carry the member id and generation (KIP-447),
checked as OffsetCommit checks them."""

from hpbroker.workers.handlers.offset_commit import known_offsets
from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import TxnOffsetCommit

API_KEY = 28


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    known, results = known_offsets(ctx, request.topics)
    if known:
        committed = await ctx.owners.ask(TxnOffsetCommit(
            request.group_id, request.transactional_id, request.producer_id, request.producer_epoch,
            getattr(request, "generation_id", -1), getattr(request, "member_id", ""),
            getattr(request, "group_instance_id", None), known))
        results.update(((x.topic, x.partition), for_version(x.error, API_KEY, header.api_version))
                       for x in committed.partitions)
    return make(m.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.TxnOffsetCommitResponseTopic, name=t.name, partitions=tuple(
            make(m.TxnOffsetCommitResponsePartition, partition_index=p.partition_index,
                 error_code=results[(t.name, p.partition_index)]) for p in t.partitions))
        for t in request.topics))
