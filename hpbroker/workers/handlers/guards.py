"""The authorization checks that decide a whole request: one group, one
transactional id, or the cluster.  A request that fails one is answered
with the error in every place its response has one (as Kafka answers it),
before its handler runs; the checks of each topic or group a request names
among others are its handler's (Produce, Fetch, Metadata, OffsetFetch, ...).

With no authorizer nothing here runs.
"""

from __future__ import annotations

from collections.abc import Callable

from hpbroker.errors import ErrorCode
from hpbroker.protocol.error_response import error_response
from hpbroker.security.acls import CLUSTER_NAME, Operation, ResourceType
from hpbroker.workers.handlers.config_entries import BROKER, BROKER_LOGGER, TOPIC

Refusal = tuple[ErrorCode, str] | None


def _cluster(*operations: Operation) -> Callable:
    """Any one of ``operations`` on the cluster (CLUSTER_AUTHORIZATION_FAILED)."""
    def check(ctx, _header, _request) -> Refusal:
        last = len(operations) - 1  # a denial is logged once, for the last one tried
        if any(ctx.access.allowed(op, ResourceType.CLUSTER, CLUSTER_NAME, quiet=i < last)
               for i, op in enumerate(operations)):
            return None
        return ErrorCode.cluster_authorization_failed, f"{operations[0].name} on the cluster is not allowed"
    return check


def _group(operation: Operation) -> Callable:
    def check(ctx, _header, request) -> Refusal:
        return group_refusal(ctx, operation, request.group_id)
    return check


def group_refusal(ctx, operation: Operation, group: str) -> Refusal:
    if ctx.access.group(operation, group):
        return None
    return ErrorCode.group_authorization_failed, f"{operation.name} on group {group!r} is not allowed"


def transactional_refusal(ctx, transactional_id: str) -> Refusal:
    if ctx.access.transactional_id(Operation.WRITE, transactional_id):
        return None
    return (ErrorCode.transactional_id_authorization_failed,
            f"WRITE on transactional id {transactional_id!r} is not allowed")


def _transactional(group: bool = False) -> Callable:
    """WRITE on the request's transactional id, then (``group``) READ on its group."""
    def check(ctx, _header, request) -> Refusal:
        refused = transactional_refusal(ctx, request.transactional_id)
        if refused is None and group:
            refused = group_refusal(ctx, Operation.READ, request.group_id)
        return refused
    return check


def config_refusal(ctx, resource, operation: Operation) -> Refusal:
    """DescribeConfigs and AlterConfigs, per resource: DESCRIBE_CONFIGS or
    ALTER_CONFIGS on the topic, or on the cluster for a broker's settings."""
    kind = resource.resource_type
    if kind == TOPIC:
        if not ctx.access.topic(operation, resource.resource_name):
            return ErrorCode.topic_authorization_failed, f"{operation.name} on this topic is not allowed"
    elif kind in (BROKER, BROKER_LOGGER):
        if not ctx.access.cluster(operation):
            return ErrorCode.cluster_authorization_failed, f"{operation.name} on the cluster is not allowed"
    return None


def _init_producer_id(ctx, _header, request) -> Refusal:
    """A transactional producer needs WRITE on its id; an idempotent one
    IDEMPOTENT_WRITE on the cluster or WRITE on some topic (KIP-679)."""
    if request.transactional_id is not None:
        return transactional_refusal(ctx, request.transactional_id)
    if ctx.access.allowed(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, quiet=True) \
            or ctx.access.on_some(Operation.WRITE, ResourceType.TOPIC):
        return None
    return (ErrorCode.cluster_authorization_failed,
            "an idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic")


def _add_partitions_to_txn(ctx, header, request) -> Refusal:
    """Brokers verifying a partition (v4+) need CLUSTER_ACTION; a client WRITE on its id."""
    if header.api_version >= 4:
        return _cluster(Operation.CLUSTER_ACTION)(ctx, header, request)
    return transactional_refusal(ctx, request.v3_and_below_transactional_id)


def _consumer_group_heartbeat(ctx, _header, request) -> Refusal:
    """READ on the group, and DESCRIBE on every topic it subscribes to (Kafka 4)."""
    refused = group_refusal(ctx, Operation.READ, request.group_id)
    if refused is not None:
        return refused
    names = set(request.subscribed_topic_names or ())
    denied = names - ctx.access.topics(Operation.DESCRIBE, names)
    if denied:
        return ErrorCode.topic_authorization_failed, f"DESCRIBE on topic {sorted(denied)[0]!r} is not allowed"
    return None


CHECKS: dict[int, Callable] = {
    8: _group(Operation.READ),  # OffsetCommit (each topic: its handler)
    11: _group(Operation.READ),  # JoinGroup
    12: _group(Operation.READ),  # Heartbeat
    13: _group(Operation.READ),  # LeaveGroup
    14: _group(Operation.READ),  # SyncGroup
    22: _init_producer_id,
    29: _cluster(Operation.DESCRIBE),  # DescribeAcls (no authorizer: SECURITY_DISABLED, its handler's)
    30: _cluster(Operation.ALTER),  # CreateAcls
    31: _cluster(Operation.ALTER),  # DeleteAcls
    24: _add_partitions_to_txn,  # (each topic: its handler)
    25: _transactional(group=True),  # AddOffsetsToTxn
    26: _transactional(),  # EndTxn
    27: _cluster(Operation.ALTER, Operation.CLUSTER_ACTION),  # WriteTxnMarkers
    28: _transactional(group=True),  # TxnOffsetCommit (each topic: its handler)
    35: _cluster(Operation.DESCRIBE),  # DescribeLogDirs
    43: _cluster(Operation.ALTER),  # ElectLeaders
    45: _cluster(Operation.ALTER),  # AlterPartitionReassignments
    46: _cluster(Operation.DESCRIBE),  # ListPartitionReassignments
    47: _group(Operation.DELETE),  # OffsetDelete (each topic: its handler)
    50: _cluster(Operation.DESCRIBE),  # DescribeUserScramCredentials
    51: _cluster(Operation.ALTER),  # AlterUserScramCredentials
    68: _consumer_group_heartbeat,
}


def guarded(api_key: int, handle: Callable) -> Callable:
    """``handle``, behind the request's whole-request check (if it has one)."""
    check = CHECKS.get(api_key)
    if check is None:
        return handle

    async def run(ctx, header, request):
        if ctx.access.enabled:
            refused = check(ctx, header, request)
            if refused is not None:
                return error_response(api_key, header.api_version, request, *refused)
        return await handle(ctx, header, request)
    return run
