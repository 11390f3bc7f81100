"""LeaveGroup (13): one member (v0-v2) or a batch of members, static ones by
``group.instance.id`` (v3+, KIP-345)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 13


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    batched = hasattr(request, "members")
    members = ([(x.member_id, x.group_instance_id) for x in request.members] if batched
               else [(request.member_id, None)])
    result = await call_group(ctx, request.group_id, "leave_group", members)
    if result is None:
        result = (ErrorCode.coordinator_not_available, [(mid, iid, ErrorCode.coordinator_not_available)
                                                        for mid, iid in members])
    error, per_member = result
    if not batched:  # the one member's error is the answer's
        error = per_member[0][2] if error == 0 and per_member else error
        return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error)
    return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error, members=tuple(
        make(m.MemberResponse, member_id=mid, group_instance_id=iid, error_code=e)
        for mid, iid, e in per_member))
