"""SyncGroup (14): the leader hands in the assignment, every member gets its
own share once the leader has (followers wait for it)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 14


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    assignments = [(a.member_id, bytes(a.assignment)) for a in request.assignments]
    result = await call_group(ctx, request.group_id, "sync_group", request.generation_id, request.member_id,
                              getattr(request, "group_instance_id", None), getattr(request, "protocol_type", None),
                              getattr(request, "protocol_name", None), assignments)
    if result is None:
        result = (ErrorCode.coordinator_not_available, None, None, b"")
    error, protocol_type, protocol_name, assignment = result
    return make(m.SyncGroupResponse, throttle_time=NO_THROTTLE, error_code=error,
                protocol_type=protocol_type, protocol_name=protocol_name, assignment=assignment)
