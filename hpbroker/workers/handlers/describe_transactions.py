"""DescribeTransactions (65): each transactional id as its coordinator keeps
it (state, timeout, start, producer id and epoch, partitions);
TRANSACTIONAL_ID_NOT_FOUND for an id it does not know."""

import asyncio
import datetime

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import DescribeTxn

API_KEY = 65
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def _time(ms: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(milliseconds=ms)  # -1 (no transaction open) encodes as -1


async def _denied(transactional_id: str):
    return DescribeTxn(transactional_id).unanswered(ErrorCode.transactional_id_authorization_failed)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    found = await asyncio.gather(*(ctx.owners.ask(DescribeTxn(tid))
                                   if ctx.access.transactional_id(Operation.DESCRIBE, tid) else _denied(tid)
                                   for tid in request.transactional_ids))
    states = []
    for tid, d in zip(request.transactional_ids, found):
        by_topic: dict[str, list[int]] = {}
        described = ctx.access.topics(Operation.DESCRIBE, {topic for topic, _ in d.partitions}, quiet=True)
        for topic, partition in d.partitions:
            if topic not in described:
                continue  # the client may not see this topic: left out, as Kafka does
            by_topic.setdefault(topic, []).append(partition)
        states.append(make(m.TransactionState, error_code=d.error, transactional_id=tid, transaction_state=d.state,
                           transaction_timeout=datetime.timedelta(milliseconds=d.timeout_ms),
                           transaction_start_time=_time(d.start_ms), producer_id=d.producer_id,
                           producer_epoch=d.producer_epoch, topics=tuple(
                               make(m.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items())))
    return make(m.DescribeTransactionsResponse, throttle_time=NO_THROTTLE, transaction_states=tuple(states))
