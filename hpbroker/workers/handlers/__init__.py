"""One module per Kafka API: decode (done by the connection), do, answer.

Each module has ``API_KEY`` and ``async def handle(ctx, header, request)``
returning a kio response, a list of pieces (Fetch), or None (no answer, as for
Produce with acks=0).  ``ROUTES`` maps api keys to them, each behind its
whole-request authorization check, if it has one (``guards.py``).
"""

from hpbroker.workers.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_partition_reassignments,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_topics,
    describe_acls,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sasl_authenticate,
    sasl_handshake,
    sync_group,
    txn_offset_commit,
    write_txn_markers,
)
from hpbroker.workers.handlers.guards import guarded

_MODULES = (add_offsets_to_txn, add_partitions_to_txn, alter_partition_reassignments, alter_user_scram_credentials,
            api_versions, consumer_group_describe, consumer_group_heartbeat, create_partitions, create_topics,
            delete_groups, delete_records, delete_topics, describe_cluster, describe_configs, describe_groups,
            describe_log_dirs, describe_producers, describe_transactions, describe_user_scram_credentials,
            elect_leaders, end_txn, fetch, find_coordinator, heartbeat, init_producer_id, join_group, leave_group,
            list_groups, list_offsets, list_partition_reassignments, list_transactions, metadata, offset_commit,
            offset_delete, offset_fetch, offset_for_leader_epoch, produce, sasl_authenticate, sasl_handshake,
            sync_group, txn_offset_commit, write_txn_markers)
_MODULES += (create_acls, delete_acls, describe_acls)
ROUTES = {module.API_KEY: guarded(module.API_KEY, module.handle) for module in _MODULES}
ROUTES[alter_configs.ALTER_CONFIGS] = alter_configs.handle_alter_configs
ROUTES[alter_configs.INCREMENTAL_ALTER_CONFIGS] = alter_configs.handle_incremental_alter_configs
