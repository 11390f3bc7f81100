"""Metadata (3): every live broker, and each partition's leader, replicas,
ISR and offline replicas (standalone: this broker for all); topics may be
created on first mention (``auto.create.topics.enable``, ``num.partitions``).
With an authorizer, a listing of all topics leaves out those the client may
not DESCRIBE; a topic named is TOPIC_AUTHORIZATION_FAILED then, and so is
one that would be created without CREATE on the cluster or on it."""

import logging

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation, ResourceType
from hpbroker.sentinels import NO_LEADER
from hpbroker.workers.client_identity import LISTENER
from hpbroker.workers.cluster_view import PartitionView
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.topics import TopicError

API_KEY = 3
log = logging.getLogger(__name__)
_NO_OPERATIONS = -2147483648  # "not requested"


def _requested(ctx, header, request):
    """(name, topic_id, known TopicInfo or None) for each topic asked about; None = all."""
    topics = request.topics
    if topics is None or (header.api_version == 0 and not topics):
        return None
    found = []
    for t in topics:
        name = getattr(t, "name", None)
        topic_id = getattr(t, "topic_id", None)
        info = ctx.topics.get(name) if name is not None else ctx.topics.by_id(topic_id) if topic_id else None
        found.append((name, topic_id, info))
    return found


async def _auto_create(ctx, name):
    try:
        return await ctx.topics.create(name, ctx.config["num.partitions"]), ErrorCode.none
    except TopicError as exc:
        if exc.code == ErrorCode.topic_already_exists:  # created meanwhile by another client
            return ctx.topics.get(name), ErrorCode.none
        log.info("auto-creating topic %r refused: %s", name, exc)
        return None, exc.code


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    me = ctx.identity
    ctx.topics.refresh()  # topics created, grown or deleted through the other workers
    requested = _requested(ctx, header, request)
    allow_create = getattr(request, "allow_auto_topic_creation", True) and ctx.config["auto.create.topics.enable"]
    access = ctx.access
    entries = []
    if requested is None:  # every topic the client may describe, the others left out
        entries = [(t.name, t.topic_id, t, ErrorCode.none) for t in ctx.topics.all()
                   if access.topic(Operation.DESCRIBE, t.name, quiet=True)]
    else:
        for name, topic_id, info in requested:
            error = ErrorCode.none
            known = info.name if info is not None else name
            if known is not None and not access.topic(Operation.DESCRIBE, known):
                # as Kafka answers: whether the topic exists is not told
                entries.append((name, topic_id, None, ErrorCode.topic_authorization_failed))
                continue
            if info is None and name is not None and allow_create:
                if not (access.cluster(Operation.CREATE) or access.topic(Operation.CREATE, name)):
                    entries.append((name, topic_id, None, ErrorCode.topic_authorization_failed))
                    continue
                info, error = await _auto_create(ctx, name)
            elif info is None:
                error = ErrorCode.unknown_topic_or_partition if name is not None else ErrorCode.unknown_topic_id
            entries.append((name, topic_id, info, error))
    topics = []
    for name, topic_id, info, error in entries:
        partitions = ()
        if info is not None:
            partitions = tuple(_partition(m, p, _reachable(ctx, info.name, p, header.api_version))
                               for p in range(info.partitions))
        if info is None and name is None and header.api_version < 12:
            name = ""  # an unknown topic id; names are nullable in responses only from v12
        topics.append(make(
            m.MetadataResponseTopic, error_code=error, name=info.name if info else name,
            # an unknown id is echoed, as Kafka does, so the client can tell which one
            topic_id=info.topic_id if info else topic_id, is_internal=bool(info and info.is_internal),
            partitions=partitions,
            topic_authorized_operations=access.operations(ResourceType.TOPIC, info.name)
            if info is not None and getattr(request, "include_topic_authorized_operations", False)
            else _NO_OPERATIONS))
    brokers = tuple(make(m.MetadataResponseBroker, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
                    for b in ctx.cluster.brokers(LISTENER.get()))
    return make(m.MetadataResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, brokers=brokers,
                cluster_id=me.cluster_id, controller_id=ctx.cluster.controller_id, topics=tuple(topics),
                cluster_authorized_operations=access.cluster_operations()
                if getattr(request, "include_cluster_authorized_operations", False) else _NO_OPERATIONS)


def _reachable(ctx, topic: str, partition: int, version: int) -> PartitionView:
    """The partition's view; a leader the client cannot reach through its
    listener (that broker has none of that name) is no leader to it, as Kafka
    answers: LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before."""
    view = ctx.cluster.partition(topic, partition)
    listener = LISTENER.get()
    if listener is None or view.error != ErrorCode.none or ctx.cluster.node(view.leader, listener) is not None:
        return view
    error = ErrorCode.listener_not_found if version >= 6 else ErrorCode.leader_not_available
    return view._replace(error=error, leader=NO_LEADER)


def _partition(m, index: int, view):
    return make(m.MetadataResponsePartition, error_code=view.error, partition_index=index, leader_id=view.leader,
                leader_epoch=view.leader_epoch, replica_nodes=view.replicas, isr_nodes=view.isr,
                offline_replicas=view.offline)
