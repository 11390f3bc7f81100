"""FindCoordinator (10): advertised because librdkafka enables LZ4 only when
v0 is; group and transaction coordinators arrive with the consumer-group work,
until then every key is answered COORDINATOR_NOT_AVAILABLE (retriable)."""

from hpbroker.protocol import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 10
_UNAVAILABLE = ErrorCode.coordinator_not_available


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    keys = getattr(request, "coordinator_keys", None)
    if keys is None:  # v0-v3: one key
        return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, error_code=_UNAVAILABLE,
                    error_message="group coordination is not available yet", node_id=-1, host="", port=-1)
    coordinators = tuple(make(m.Coordinator, key=key, node_id=-1, host="", port=-1, error_code=_UNAVAILABLE,
                              error_message="group coordination is not available yet") for key in keys)
    return make(m.FindCoordinatorResponse, throttle_time=NO_THROTTLE, coordinators=coordinators)
