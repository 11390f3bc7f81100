"""ConsumerGroupDescribe (69): groups of the consumer protocol, each from its
coordinator: epochs, assignor, and every member's assignment and target.  A
classic group, or none, is GROUP_ID_NOT_FOUND (clients then ask DescribeGroups)."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import DescribeConsumerGroup

API_KEY = 69


def _assignment(m, topics):
    return make(m.Assignment, topic_partitions=tuple(
        make(m.TopicPartitions, topic_id=topic_id, topic_name=name, partitions=tuple(partitions))
        for topic_id, name, partitions in topics))


async def _denied(group_id: str):
    return DescribeConsumerGroup(group_id).unanswered(ErrorCode.group_authorization_failed)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    answers = await asyncio.gather(*(ctx.owners.ask(DescribeConsumerGroup(gid))
                                     if ctx.access.group(Operation.DESCRIBE, gid) else _denied(gid)
                                     for gid in request.group_ids))
    return make(m.ConsumerGroupDescribeResponse, throttle_time=NO_THROTTLE, groups=tuple(
        make(m.DescribedGroup, error_code=d.error, error_message=d.message, group_id=gid, group_state=d.state,
             group_epoch=d.group_epoch, assignment_epoch=d.assignment_epoch, assignor_name=d.assignor,
             members=tuple(
                 make(m.Member, member_id=x.member_id, instance_id=x.instance_id, rack_id=x.rack_id,
                      member_epoch=x.member_epoch, client_id=x.client_id, client_host=x.client_host,
                      subscribed_topic_names=tuple(x.topic_names), subscribed_topic_regex=x.topic_regex,
                      assignment=_assignment(m, x.assignment), target_assignment=_assignment(m, x.target),
                      member_type=1)  # joined with the consumer protocol (KIP-1099)
                 for x in d.members))
        for gid, d in zip(request.group_ids, answers)))
