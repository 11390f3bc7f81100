"""ElectLeaders (43): give partitions back to their preferred replica (type 0)
or, for partitions without a live leader, elect one from outside the ISR
(type 1, unclean).

In a cluster the controller runs elections; this broker checks each partition
against its image as Kafka's controller does (the preferred replica already
leads: ELECTION_NOT_NEEDED; it is not live or not in the ISR:
PREFERRED_LEADER_NOT_AVAILABLE; an unclean election with a live leader:
ELECTION_NOT_NEEDED, with no live replica: ELIGIBLE_LEADERS_NOT_AVAILABLE),
asks for the rest through ZooKeeper (Kafka's ``/admin/preferred_replica_election``,
hpbroker's ``/admin/unclean_leader_election``) and answers once the image
shows the new leaders, or REQUEST_TIMED_OUT after the request's timeout.
Standalone, this broker leads everything already.  With a null topic list
every partition is considered and only those elected or failed are listed."""

import time

from hpbroker.cluster.admin import AdminError
from hpbroker.errors import ErrorCode
from hpbroker.sentinels import NO_LEADER
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 43
PREFERRED = 0
UNCLEAN = 1


def _everything(ctx) -> list[tuple[str, int]]:
    if ctx.cluster.standalone:
        return [(info.name, p) for info in ctx.topics.all() for p in range(info.partitions)]
    image = ctx.cluster.image
    return [(topic, p) for topic, p, _replicas, _state in image.partitions() if topic not in image.topics_being_deleted]


def _check(ctx, topic: str, p: int, election_type: int) -> tuple[ErrorCode, str | None]:
    """The answer known before any election, or ``none`` when one is to be run."""
    if ctx.cluster.standalone:
        info = ctx.topics.get(topic)
        if info is None or not 0 <= p < info.partitions:
            return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    image = ctx.cluster.image
    assignment = image.topics.get(topic)
    if assignment is None or p not in assignment.partitions:
        return ErrorCode.unknown_topic_or_partition, "The partition does not exist."
    if topic in image.topics_being_deleted:
        return ErrorCode.invalid_topic_exception, "The topic is being deleted"
    replicas, state = assignment.partitions[p], image.states.get((topic, p))
    live = image.live - image.shutting_down
    if election_type == PREFERRED:
        if state is not None and state.leader == replicas[0]:
            return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
        if state is None or replicas[0] not in live or replicas[0] not in state.isr:
            return (ErrorCode.preferred_leader_not_available,
                    f"the preferred replica {replicas[0]} of {topic}-{p} is not live and in sync")
        return ErrorCode.none, None
    if state is not None and state.leader in live:
        return ErrorCode.election_not_needed, "Leader election not needed for topic partition."
    if not any(r in live for r in replicas):
        return ErrorCode.eligible_leaders_not_available, f"no replica of {topic}-{p} is live"
    return ErrorCode.none, None


def _elected(ctx, topic: str, p: int, election_type: int) -> bool:
    image = ctx.cluster.image
    assignment, state = image.topics.get(topic), image.states.get((topic, p))
    if assignment is None or p not in assignment.partitions or state is None:
        return False
    if election_type == PREFERRED:
        return state.leader == assignment.partitions[p][0]
    return state.leader != NO_LEADER and state.leader in image.live


async def _elect(ctx, asked: list[tuple[str, int]], election_type: int, timeout_s: float) -> dict:
    admin = ctx.topics.admin
    request = admin.request_preferred_election if election_type == PREFERRED else admin.request_unclean_election
    try:
        await request(asked)
    except AdminError as exc:
        return {key: (ErrorCode.request_timed_out, str(exc)) for key in asked}
    deadline = time.monotonic() + timeout_s
    waiting = set(asked)
    while waiting:
        waiting = {key for key in waiting if not _elected(ctx, *key, election_type)}
        if not waiting or time.monotonic() >= deadline:
            break
        await ctx.topics.changed(deadline - time.monotonic())
    return {key: (ErrorCode.request_timed_out, "the election did not complete within the request's timeout")
            if key in waiting else (ErrorCode.none, None) for key in asked}


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    election_type = getattr(request, "election_type", PREFERRED)  # v0 elects preferred replicas only
    everything = request.topic_partitions is None
    if everything:
        wanted = _everything(ctx)
    else:
        wanted = list(dict.fromkeys((t.topic, int(p)) for t in request.topic_partitions for p in t.partitions))
    if election_type not in (PREFERRED, UNCLEAN):
        results = {key: (ErrorCode.invalid_request, f"unknown election type {election_type}") for key in wanted}
    else:
        results = {key: _check(ctx, *key, election_type) for key in wanted}
        asked = [key for key, (error, _message) in results.items() if error == ErrorCode.none]
        if asked:
            results.update(await _elect(ctx, asked, election_type, max(0.0, request.timeout.total_seconds())))
    by_topic: dict[str, list] = {}
    for (topic, p), (error, message) in results.items():
        if everything and error == ErrorCode.election_not_needed:
            continue  # Kafka lists, of all partitions, only those elected or failed
        by_topic.setdefault(topic, []).append(make(m.PartitionResult, partition_id=p, error_code=error,
                                                   error_message=message))
    return make(m.ElectLeadersResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                replica_election_results=tuple(make(m.ReplicaElectionResult, topic=topic, partition_result=tuple(parts))
                                               for topic, parts in by_topic.items()))
