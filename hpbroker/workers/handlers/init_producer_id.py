"""InitProducerId (22): a producer id and epoch for an idempotent producer.

Without a transactional id every request gets a new producer id at epoch 0,
as Kafka answers it, whatever id and epoch it names (v3+, KIP-360): nothing
proves the producer naming them is the one that holds them, and two
producers sharing an id and epoch would have one's batches taken for the
other's retries.  Some clients name one even when new (@platformatic/kafka
sends id 0, epoch 0).  A transactional id's producer id and epoch come from
its transaction coordinator, which fences the previous instance.
"""

import logging

from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, millis, response_module
from hpbroker.workers.owner_calls import InitTxnProducer

API_KEY = 22
log = logging.getLogger(__name__)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    producer_id, epoch = getattr(request, "producer_id", -1), getattr(request, "producer_epoch", -1)
    if (producer_id == -1) != (epoch == -1):  # a producer named by half (v3+), refused as Kafka does
        return _refused(m, ErrorCode.invalid_request)
    if request.transactional_id is not None:
        got = await ctx.owners.ask(InitTxnProducer(
            request.transactional_id, millis(request.transaction_timeout), producer_id, epoch))
        return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE,
                    error_code=for_version(got.error, API_KEY, header.api_version), producer_id=got.producer_id,
                    producer_epoch=got.producer_epoch)
    try:
        new_id = await ctx.producer_ids.allocate()
    except AdminError as exc:  # a cluster's id blocks come from ZooKeeper: retriable
        log.warning("no producer id: %s", exc)
        return _refused(m, ErrorCode.coordinator_not_available)
    return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                producer_id=new_id, producer_epoch=0)


def _refused(m, error: ErrorCode):
    return make(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=error, producer_id=-1,
                producer_epoch=-1)
