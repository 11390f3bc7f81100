"""JoinGroup (11): forwarded to the group's coordinator, where it waits for the
rebalance to complete (up to the rebalance timeout).  v4+ first get a member id
with MEMBER_ID_REQUIRED (KIP-394); v0 has no rebalance timeout (it is the
session timeout)."""

import datetime

from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import JoinGroup

API_KEY = 11


def to_ms(value) -> int:
    """A kio timeout (a timedelta) in milliseconds."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    session_ms = to_ms(request.session_timeout)
    rebalance_ms = to_ms(getattr(request, "rebalance_timeout", request.session_timeout))
    result = await ctx.owners.ask(JoinGroup(
        request.group_id, request.member_id, getattr(request, "group_instance_id", None), header.client_id or "",
        ctx.client_host, session_ms, rebalance_ms, request.protocol_type,
        [(p.name, bytes(p.metadata)) for p in request.protocols], header.api_version >= 4))
    member_id = result.member_id or request.member_id
    protocol_name = result.protocol_name
    if header.api_version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    return make(m.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                generation_id=result.generation, protocol_type=result.protocol_type, protocol_name=protocol_name,
                leader=result.leader, skip_assignment=result.skip_assignment, member_id=member_id, members=tuple(
                    make(m.JoinGroupResponseMember, member_id=x.member_id, group_instance_id=x.instance_id,
                         metadata=x.metadata) for x in result.members))
