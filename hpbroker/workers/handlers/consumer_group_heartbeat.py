"""ConsumerGroupHeartbeat (68): a member of a consumer group of the consumer
protocol (KIP-848, ``group.protocol=consumer``) joins, heartbeats or leaves
through its coordinator, which answers its epoch and its assignment
(``groups/consumer_group.py``).  The shape of the request is checked here,
as Kafka checks it before the coordinator: each rule broken is INVALID_REQUEST
with a message saying which."""

import base64
import datetime
import uuid

from hpbroker.errors import ErrorCode
from hpbroker.workers.groups.consumer_group import JOIN_EPOCH, LEAVE_EPOCH, STATIC_LEAVE_EPOCH
from hpbroker.workers.handlers.join_group import to_ms
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import ConsumerGroupHeartbeat, ConsumerHeartbeatResult

API_KEY = 68


def new_member_id() -> str:
    """A random id in Kafka's spelling of a Uuid (22 characters of URL-safe base64)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def invalid(request, version: int) -> str | None:
    """Why the request is malformed, or None."""
    if not request.group_id.strip():
        return "GroupId can't be empty."
    if request.instance_id is not None and not request.instance_id.strip():
        return "InstanceId can't be empty."
    if request.rack_id is not None and not request.rack_id.strip():
        return "RackId can't be empty."
    epoch = request.member_epoch
    if not request.member_id and (version >= 1 or epoch > 0 or epoch == LEAVE_EPOCH):
        return "MemberId can't be empty."
    if epoch < STATIC_LEAVE_EPOCH:
        return f"MemberEpoch {epoch} is invalid."
    if epoch == STATIC_LEAVE_EPOCH and request.instance_id is None:
        return "InstanceId can't be null when a static member leaves."
    if epoch == JOIN_EPOCH:
        if to_ms(request.rebalance_timeout) < 0:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.topic_partitions is None or request.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        regex = getattr(request, "subscribed_topic_regex", None)
        if request.subscribed_topic_names is None and regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    return None


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    why = invalid(request, header.api_version)
    if why is not None:
        result = ConsumerHeartbeatResult(ErrorCode.invalid_request, why)
    else:
        member_id = request.member_id or new_member_id()  # v0: the coordinator names a joining member
        owned = None if request.topic_partitions is None else [
            (t.topic_id, list(t.partitions)) for t in request.topic_partitions]
        result = await ctx.owners.ask(ConsumerGroupHeartbeat(
            request.group_id, member_id, request.member_epoch, request.instance_id, request.rack_id,
            to_ms(request.rebalance_timeout),
            None if request.subscribed_topic_names is None else list(request.subscribed_topic_names),
            getattr(request, "subscribed_topic_regex", None), request.server_assignor, owned,
            header.client_id or "", ctx.client_host))
    assignment = None if result.assignment is None else make(m.Assignment, topic_partitions=tuple(
        make(m.TopicPartitions, topic_id=topic_id, partitions=tuple(partitions))
        for topic_id, partitions in result.assignment))
    return make(m.ConsumerGroupHeartbeatResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                error_message=result.message, member_id=result.member_id, member_epoch=result.member_epoch,
                heartbeat_interval=datetime.timedelta(milliseconds=result.heartbeat_ms), assignment=assignment)
