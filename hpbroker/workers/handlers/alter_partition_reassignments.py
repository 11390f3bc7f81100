"""AlterPartitionReassignments (45): move partitions to other replicas, or
cancel a move (a null replica list).

In a cluster the topic znode is rewritten (``ClusterAdmin.alter_reassignments``,
a coroutine) and the controller carries the move out.  Standalone, the
one broker holds every replica: naming it alone changes nothing and succeeds,
and anything else names a broker that is not there, as Kafka would answer on
a one-broker cluster (the same checks, ``cluster.reassignment.plan``)."""

from hpbroker.cluster import reassignment, znodes
from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 45


async def _alter(ctx, topic: str, changes: dict, allow: bool) -> dict:
    if ctx.cluster.standalone:
        me = ctx.identity.broker_id
        info = ctx.topics.get(topic)
        assignment = None if info is None else znodes.TopicAssignment(topic, {p: [me] for p in range(info.partitions)})
        _unchanged, outcomes = reassignment.plan(topic, assignment, changes, {me},
                                                 allow_replication_factor_change=allow)
        return outcomes
    try:
        return await ctx.topics.admin.alter_reassignments(topic, changes, allow_replication_factor_change=allow)
    except AdminError as exc:
        return {p: reassignment.Outcome(ErrorCode.request_timed_out, str(exc)) for p in changes}


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    allow = getattr(request, "allow_replication_factor_change", True)  # v1+
    responses = []
    for topic in request.topics:
        changes = {p.partition_index: None if p.replicas is None else [int(r) for r in p.replicas]
                   for p in topic.partitions}
        outcomes = await _alter(ctx, topic.name, changes, allow)
        responses.append(make(m.ReassignableTopicResponse, name=topic.name, partitions=tuple(
            make(m.ReassignablePartitionResponse, partition_index=p.partition_index,
                 error_code=outcomes[p.partition_index].error, error_message=outcomes[p.partition_index].message)
            for p in topic.partitions)))
    return make(m.AlterPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, allow_replication_factor_change=allow, responses=tuple(responses))
