"""One module per Kafka API: decode (done by the connection), do, answer.

Each module has ``API_KEY`` and ``async def handle(ctx, header, request)``
returning a kio response, a list of pieces (Fetch), or None (no answer, as for
Produce with acks=0).  ``ROUTES`` maps api keys to them.
"""

from hpbroker.workers.handlers import (api_versions, create_partitions, create_topics, delete_records, delete_topics,
                                       describe_cluster, describe_configs, fetch, find_coordinator, init_producer_id,
                                       list_offsets, metadata, offset_for_leader_epoch, produce)

_MODULES = (api_versions, create_partitions, create_topics, delete_records, delete_topics, describe_cluster,
            describe_configs, fetch, find_coordinator, init_producer_id, list_offsets, metadata,
            offset_for_leader_epoch, produce)
ROUTES = {module.API_KEY: module.handle for module in _MODULES}
