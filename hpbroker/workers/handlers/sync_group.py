"""SyncGroup (14): the leader hands in the assignment, every member gets its
own share once the leader has (followers wait for it)."""

from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import SyncGroup

API_KEY = 14


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    result = await ctx.owners.ask(SyncGroup(
        request.group_id, request.generation_id, request.member_id, getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None), getattr(request, "protocol_name", None),
        [(a.member_id, bytes(a.assignment)) for a in request.assignments]))
    return make(m.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=result.error,
                protocol_type=result.protocol_type, protocol_name=result.protocol_name, assignment=result.assignment)
