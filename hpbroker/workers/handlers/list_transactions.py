"""ListTransactions (66): every worker coordinates some transactional ids, so
all are asked and the lists merged.  Filters: states (unknown names are
echoed back, as Kafka does), producer ids, and (v1) a minimum running time."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation, ResourceType
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import ListTxns
from hpbroker.workers.transactions.state import TxnState

API_KEY = 66


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    states = list(request.state_filters)
    unknown = tuple(s for s in states if TxnState.by_display(s) is None)
    duration = getattr(request, "duration_filter", -1)
    call = ListTxns([s for s in states if s not in unknown], list(request.producer_id_filters), int(duration))
    if states and len(unknown) == len(states):
        answers = []  # only unknown states asked for: nothing can match
    else:
        answers = await asyncio.gather(*(ctx.owners.ask(call, worker) for worker in range(ctx.workers)))
    error = next((a.error for a in answers if a.error != ErrorCode.none), ErrorCode.none)
    rows = sorted((t.transactional_id, t.producer_id, t.state) for a in answers for t in a.transactions
                  if ctx.access.allowed(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, t.transactional_id,
                                        quiet=True))
    return make(m.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=error,
                unknown_state_filters=unknown, transaction_states=tuple(
                    make(m.TransactionState, transactional_id=tid, producer_id=pid, transaction_state=state)
                    for tid, pid, state in rows))
