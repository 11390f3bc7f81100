"""DescribeGroups (15): each group asked from its coordinator.  An unknown group
is "Dead" with no error before v6 and GROUP_ID_NOT_FOUND from v6 (KIP-1043)."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 15
_NO_OPERATIONS = -2147483648


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    results = await asyncio.gather(*(call_group(ctx, gid, "describe_group") for gid in request.groups))
    described = []
    for gid, result in zip(request.groups, results):
        error, state, protocol_type, protocol_data, members = result or (
            ErrorCode.coordinator_not_available, "", "", "", [])
        message = None
        if error == ErrorCode.group_id_not_found:
            if header.api_version >= 6:
                message = f"group {gid!r} does not exist"
            else:
                error = ErrorCode.none
        described.append(make(
            m.DescribedGroup, error_code=error, error_message=message, group_id=gid, group_state=state,
            protocol_type=protocol_type, protocol_data=protocol_data, authorized_operations=_NO_OPERATIONS,
            members=tuple(make(m.DescribedGroupMember, member_id=mid, group_instance_id=iid, client_id=client_id,
                               client_host=host, member_metadata=metadata, member_assignment=assignment)
                          for mid, iid, client_id, host, metadata, assignment in members)))
    return make(m.DescribeGroupsResponse, throttle_time=NO_THROTTLE, groups=tuple(described))
