"""DescribeCluster (60): one broker, which is also the controller."""

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 60
_NO_OPERATIONS = -2147483648


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    me = ctx.identity
    broker = make(m.DescribeClusterBroker, broker_id=me.broker_id, host=me.host, port=me.port, rack=None, is_fenced=False)
    return make(m.DescribeClusterResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                endpoint_type=1, cluster_id=me.cluster_id, controller_id=me.broker_id, brokers=(broker,),
                cluster_authorized_operations=_NO_OPERATIONS)
