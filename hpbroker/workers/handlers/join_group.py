"""JoinGroup (11): forwarded to the group's coordinator, where it waits for the
rebalance to complete (up to the rebalance timeout).  v4+ first get a member id
with MEMBER_ID_REQUIRED (KIP-394); v0 has no rebalance timeout (it is the
session timeout)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group, to_ms
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 11


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    session_ms = to_ms(request.session_timeout)
    rebalance_ms = to_ms(getattr(request, "rebalance_timeout", request.session_timeout))
    protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
    result = await call_group(ctx, request.group_id, "join_group", request.member_id,
                              getattr(request, "group_instance_id", None), header.client_id or "", ctx.client_host,
                              session_ms, rebalance_ms, request.protocol_type, protocols, header.api_version >= 4)
    if result is None:
        result = (ErrorCode.coordinator_not_available, -1, None, None, "", request.member_id, [], False)
    error, generation, protocol_type, protocol_name, leader, member_id, members, skip = result
    if header.api_version < 7 and protocol_name is None:
        protocol_name = ""  # not nullable before v7
    return make(m.JoinGroupResponse, throttle_time=NO_THROTTLE, error_code=error, generation_id=generation,
                protocol_type=protocol_type, protocol_name=protocol_name, leader=leader or "", skip_assignment=skip,
                member_id=member_id, members=tuple(
                    make(m.JoinGroupResponseMember, member_id=mid, group_instance_id=instance, metadata=metadata)
                    for mid, instance, metadata in members))
