"""EndTxn (26): commit or abort the producer's transaction.  Answered once
the decision is written to ``__transaction_state`` and the markers are out
(or on their way, when they take long)."""

from hpbroker.workers.handlers.txn_common import for_version
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import EndTxn

API_KEY = 26


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    ended = await ctx.owners.ask(EndTxn(request.transactional_id, request.producer_id, request.producer_epoch,
                                        bool(request.committed)))
    return make(m.EndTxnResponse, throttle_time=NO_THROTTLE,
                error_code=for_version(ended.error, API_KEY, header.api_version))
