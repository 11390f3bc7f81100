"""AddOffsetsToTxn (25): a transactional producer is about to commit a
group's offsets in its transaction (``send_offsets_to_transaction``); the
group's ``__consumer_offsets`` partition joins the transaction, so its
marker settles those offsets."""

from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import OFFSETS_TOPIC, group_partition
from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import AddTxnPartitions

API_KEY = 25


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    if await ctx.groups.ensure_offsets_topic() != ErrorCode.none:
        error = ErrorCode.coordinator_not_available
    else:
        partition = group_partition(request.group_id, ctx.config["offsets.topic.num.partitions"])
        added = await ctx.owners.ask(AddTxnPartitions(request.transactional_id, request.producer_id,
                                                      request.producer_epoch, [(OFFSETS_TOPIC, partition)]))
        error = added.error if added.error != ErrorCode.none else added.partitions[0].error
    return make(m.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE,
                error_code=for_version(error, API_KEY, header.api_version))
