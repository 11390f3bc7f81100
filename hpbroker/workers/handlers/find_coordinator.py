"""FindCoordinator (10): every group is coordinated by this broker (its owning
worker is found per request, inside the broker); ``__consumer_offsets`` is
created on the first lookup, as Kafka does.  v4+ batch the keys.

There is no transaction coordinator yet.  A retriable answer would keep
``init_transactions()`` spinning until its timeout, so transactional ids get
TRANSACTIONAL_ID_AUTHORIZATION_FAILED, which librdkafka, kafka-python and the
Java client all treat as fatal at once, with a message saying why."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 10
GROUP, TRANSACTION = 0, 1
TRANSACTIONS_UNSUPPORTED = "hpbroker does not support transactions yet (idempotent producers work)"


def _find(ctx, key_type: int, key: str):
    """(error, message) for one key."""
    if key_type == TRANSACTION:
        return ErrorCode.transactional_id_authorization_failed, TRANSACTIONS_UNSUPPORTED
    if key_type != GROUP:
        return ErrorCode.invalid_request, f"unknown key type {key_type}"
    if ctx.groups.ensure_offsets_topic() != ErrorCode.none:
        return ErrorCode.coordinator_not_available, "the offsets topic could not be created"
    return ErrorCode.none, None


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    me = ctx.identity
    key_type = getattr(request, "key_type", GROUP)
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:  # v0-v3: one key
        error, message = _find(ctx, key_type, request.key)
        ok = error == ErrorCode.none
        return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                    node_id=me.broker_id if ok else -1, host=me.host if ok else "", port=me.port if ok else -1)
    coordinators = []
    for key in keys:
        error, message = _find(ctx, key_type, key)
        ok = error == ErrorCode.none
        coordinators.append(make(m.Coordinator, key=key, node_id=me.broker_id if ok else -1, host=me.host if ok else "",
                                 port=me.port if ok else -1, error_code=error, error_message=message))
    return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
