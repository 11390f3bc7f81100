"""LeaveGroup (13): one member (v0-v2) or a batch of members, static ones by
``group.instance.id`` (v3+, KIP-345)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import LeaveGroup

API_KEY = 13


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    batched = hasattr(request, "members")
    members: list[tuple[str, str | None]] = ([(x.member_id, x.group_instance_id) for x in request.members]
                                             if batched else [(request.member_id, None)])
    result = await ctx.owners.ask(LeaveGroup(request.group_id, members))
    if not batched:  # the one member's error is the answer's
        error = result.members[0].error if result.error == ErrorCode.none and result.members else result.error
        return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=error)
    return make(m.LeaveGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error, members=tuple(
        make(m.MemberResponse, member_id=x.member_id, group_instance_id=x.instance_id, error_code=x.error)
        for x in result.members))
