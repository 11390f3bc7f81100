"""DescribeCluster (60): every live broker and the controller (standalone:
this broker, which is also the controller)."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.client_identity import LISTENER
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 60
_NO_OPERATIONS = -2147483648
BROKERS = 1  # endpoint_type: 1 brokers, 2 controllers


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    if getattr(request, "endpoint_type", BROKERS) != BROKERS:
        # v1+ (KIP-919): the controllers' endpoints are a KRaft controller's to answer
        return make(m.DescribeClusterResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.mismatched_endpoint_type,
                    error_message="this is a broker: it describes brokers, not controllers",
                    endpoint_type=BROKERS, cluster_id=ctx.identity.cluster_id, controller_id=-1, brokers=(),
                    cluster_authorized_operations=_NO_OPERATIONS)
    brokers = tuple(make(m.DescribeClusterBroker, broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack,
                         is_fenced=False) for b in ctx.cluster.brokers(LISTENER.get()))
    return make(m.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                endpoint_type=BROKERS, cluster_id=ctx.identity.cluster_id, controller_id=ctx.cluster.controller_id,
                brokers=brokers, cluster_authorized_operations=ctx.access.cluster_operations()
                if request.include_cluster_authorized_operations else _NO_OPERATIONS)
