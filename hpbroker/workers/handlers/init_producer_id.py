"""InitProducerId (22): a producer id and epoch for an idempotent producer.

A producer that sends its current id and epoch (v3+, KIP-360) gets the epoch
bumped, so it can reset its sequences without losing its id.  A
transactional id's producer id and epoch come from its transaction
coordinator, which fences the previous instance.
"""

import logging

from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, millis, response_module
from hpbroker.workers.owner_calls import InitTxnProducer

API_KEY = 22
log = logging.getLogger(__name__)
_MAX_EPOCH = 32767


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    if request.transactional_id is not None:
        got = await ctx.owners.ask(InitTxnProducer(
            request.transactional_id, millis(request.transaction_timeout),
            getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)))
        return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=for_version(got.error, API_KEY, header.api_version), producer_id=got.producer_id,
                    producer_epoch=got.producer_epoch)
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < _MAX_EPOCH - 1:
        new_id, new_epoch = producer_id, epoch + 1
    else:
        try:
            new_id, new_epoch = await ctx.producer_ids.allocate(), 0
        except AdminError as exc:  # a cluster's id blocks come from ZooKeeper: retriable
            log.warning("no producer id: %s", exc)
            return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.coordinator_not_available, producer_id=-1, producer_epoch=-1)
    return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                producer_id=new_id, producer_epoch=new_epoch)
