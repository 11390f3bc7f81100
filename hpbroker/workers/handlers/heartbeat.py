"""Heartbeat (12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells
it to rejoin."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 12


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    error = await call_group(ctx, request.group_id, "heartbeat", request.generation_id, request.member_id,
                             getattr(request, "group_instance_id", None))
    if error is None:
        error = ErrorCode.coordinator_not_available
    return make(m.HeartbeatResponse, throttle_time=NO_THROTTLE, error_code=error)
