"""InitProducerId (22): a producer id and epoch for an idempotent producer.

A producer that sends its current id and epoch (v3+, KIP-360) gets the epoch
bumped, so it can reset its sequences without losing its id.  Transactional
ids need the transaction coordinator, which is not here yet: they fail fast,
as FindCoordinator explains.
"""

import logging

from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 22
log = logging.getLogger(__name__)
_MAX_EPOCH = 32767


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    if request.transactional_id is not None:
        return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.transactional_id_authorization_failed, producer_id=-1, producer_epoch=-1)
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
