"""ListPartitionReassignments (46): the reassignments under way, of the
partitions named or of all (a null topic list).  In a cluster they are read
from ZooKeeper at the time of the request, so a client
sees its own AlterPartitionReassignments at once; partitions that do not
exist or are not being moved are left out, as Kafka does.  A standalone
broker never has one."""

from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.per_partition import wanted_by_topic
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 46


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    wanted = wanted_by_topic(request.topics, lambda t: t.name, lambda t: t.partition_indexes)
    found = []
    if not ctx.cluster.standalone:
        try:
            found = await ctx.topics.admin.list_reassignments(wanted)
        except AdminError as exc:
            return make(m.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE,
                        error_code=ErrorCode.request_timed_out, error_message=str(exc), topics=())
    by_topic: dict[str, list] = {}
    for ongoing in found:
        by_topic.setdefault(ongoing.topic, []).append(make(
            m.OngoingPartitionReassignment, partition_index=ongoing.partition, replicas=tuple(ongoing.replicas),
            adding_replicas=tuple(ongoing.adding), removing_replicas=tuple(ongoing.removing)))
    return make(m.ListPartitionReassignmentsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, topics=tuple(make(m.OngoingTopicReassignment, name=name, partitions=tuple(parts))
                                                 for name, parts in by_topic.items()))
