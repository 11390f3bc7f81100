"""Heartbeat (12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells
it to rejoin."""

from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import Heartbeat

API_KEY = 12


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    done = await ctx.owners.ask(Heartbeat(request.group_id, request.generation_id, request.member_id,
                                          getattr(request, "group_instance_id", None)))
    return make(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=done.error)
