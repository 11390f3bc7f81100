"""FindCoordinator (10): a group's coordinator is the leader of its
``__consumer_offsets`` partition, a transactional id's the leader of its
``__transaction_state`` partition (standalone: this broker; the owning worker
is found per request, inside the broker).  Each topic is created on the first
lookup, as Kafka does.  v4+ batch the keys."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.server.ownership import OFFSETS_TOPIC, TRANSACTION_TOPIC
from hpbroker.workers.client_identity import LISTENER
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 10
GROUP, TRANSACTION = 0, 1


async def _find(ctx, key_type: int, key: str):
    """(error, message, coordinator node or None) for one key."""
    if key_type == TRANSACTION and not ctx.access.transactional_id(Operation.DESCRIBE, key):
        return ErrorCode.transactional_id_authorization_failed, "DESCRIBE on the transactional id is not allowed", None
    if key_type == GROUP and not ctx.access.group(Operation.DESCRIBE, key):
        return ErrorCode.group_authorization_failed, "DESCRIBE on the group is not allowed", None
    if key_type == TRANSACTION:
        if not key:
            return ErrorCode.invalid_request, "an empty transactional id", None
        if await ctx.transactions.ensure_topic() != ErrorCode.none:
            return ErrorCode.coordinator_not_available, f"{TRANSACTION_TOPIC} could not be created", None
        return _coordinator(ctx, key, ctx.config["transaction.state.log.num.partitions"], TRANSACTION_TOPIC,
                            "the transaction state partition")
    if key_type != GROUP:
        return ErrorCode.invalid_request, f"unknown key type {key_type}", None
    if await ctx.groups.ensure_offsets_topic() != ErrorCode.none:
        return ErrorCode.coordinator_not_available, "the offsets topic could not be created", None
    return _coordinator(ctx, key, ctx.config["offsets.topic.num.partitions"], OFFSETS_TOPIC,
                        "the group's offsets partition")


def _coordinator(ctx, key: str, partitions: int, topic: str, what: str):
    """The key's coordinator, at its address on the client's listener."""
    listener = LISTENER.get()
    node = ctx.cluster.coordinator(key, partitions, topic, listener)
    if node is not None:
        return ErrorCode.none, None, node
    if listener is not None and ctx.cluster.coordinator(key, partitions, topic) is not None:
        return ErrorCode.coordinator_not_available, f"the coordinator has no {listener} listener", None
    return ErrorCode.coordinator_not_available, f"{what} has no leader yet", None


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    key_type = getattr(request, "key_type", GROUP)
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:  # v0-v3: one key
        error, message, node = await _find(ctx, key_type, request.key)
        return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                    node_id=node.broker_id if node else -1, host=node.host if node else "",
                    port=node.port if node else -1)
    coordinators = []
    for key in keys:
        error, message, node = await _find(ctx, key_type, key)
        coordinators.append(make(m.Coordinator, key=key, node_id=node.broker_id if node else -1,
                                 host=node.host if node else "", port=node.port if node else -1, error_code=error,
                                 error_message=message))
    return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=tuple(coordinators))
