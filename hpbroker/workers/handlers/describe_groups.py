"""DescribeGroups (15): each group asked from its coordinator.  An unknown group
is "Dead" with no error before v6 and GROUP_ID_NOT_FOUND from v6 (KIP-1043)."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation, ResourceType
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import DescribeGroup

API_KEY = 15
_NO_OPERATIONS = -2147483648


async def _denied(group_id: str):
    return DescribeGroup(group_id).unanswered(ErrorCode.group_authorization_failed)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    allowed = [ctx.access.group(Operation.DESCRIBE, gid) for gid in request.groups]
    results = await asyncio.gather(*(ctx.owners.ask(DescribeGroup(gid)) if ok else _denied(gid)
                                     for gid, ok in zip(request.groups, allowed)))
    wants_operations = getattr(request, "include_authorized_operations", False)
    described = []
    for gid, result in zip(request.groups, results):
        error, message = result.error, None
        if error == ErrorCode.group_id_not_found:
            if header.api_version >= 6:
                message = f"group {gid!r} does not exist"
            else:
                error = ErrorCode.none
        described.append(make(
            m.DescribedGroup, error_code=error, error_message=message, group_id=gid, group_state=result.state,
            protocol_type=result.protocol_type, protocol_data=result.protocol_data,
            authorized_operations=ctx.access.operations(ResourceType.GROUP, gid)
            if wants_operations and error == ErrorCode.none else _NO_OPERATIONS, members=tuple(
                make(m.DescribedGroupMember, member_id=x.member_id, group_instance_id=x.instance_id,
                     client_id=x.client_id, client_host=x.client_host, member_metadata=x.metadata,
                     member_assignment=x.assignment) for x in result.members)))
    return make(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))
