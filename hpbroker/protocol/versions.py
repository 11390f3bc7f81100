"""The API versions this broker advertises, and the ApiVersions response built from them.

Clients use min(their max, our max) per API, so each range must (a) reach the
version each target client sends, (b) hold nothing we cannot decode (kio, generated
from Kafka 4's specs, starts where Kafka 4 starts) and (c) keep the old versions
that librdkafka's feature detection looks for: it enables a feature only when our
range overlaps its probe range, e.g. LZ4 needs FindCoordinator 0, idempotence
InitProducerId 0, and (before 2.11.1) compression needs Produce 0.

Targets: librdkafka 2.16 (confluent-kafka), librdkafka 2.0.2 (Debian's kcat),
kafka-python 3, aiokafka 0.14. What each sends was observed on the wire: the
requests in tests/golden/requests.jsonl (re-recorded by tests/capture_requests.py),
and the table in tests/test_protocol_versions.py.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
from types import MappingProxyType

from kio.static.primitive import i16, i32Timedelta
from kio.static.protocol import Payload

from hpbroker.errors import ErrorCode

from .schemas import API_VERSIONS, response_type

SUPPORTED_VERSIONS: MappingProxyType[int, tuple[int, int]] = MappingProxyType({
    # Produce: min 0 because librdkafka < 2.11.1 sends gzip/snappy/lz4 batches
    # uncompressed unless our range reaches v0 (Kafka 4 advertises 0 for this);
    # v0-v2 are decoded via legacy_produce. Max 10 = librdkafka 2.16's; kafka-python
    # sends 9, aiokafka 7. v11+ carry transaction-v2 and topic-id semantics.
    0: (0, 10),
    # Fetch: 4 is Kafka 4's floor (and what kio has); 4 is also librdkafka's MsgVer2
    # probe and 10 its zstd probe. Max 16 = librdkafka 2.16's, which means topic ids
    # (v13+) must resolve. kafka-python sends 12, aiokafka 11.
    1: (4, 16),
    # ListOffsets: min 1 keeps librdkafka's OffsetTime probe (1..1); kafka-python
    # sends 11 (v8+ add the -4/-5/-6 special timestamps), librdkafka 7, aiokafka 3.
    2: (1, 11),
    # Metadata: all of kio's range; librdkafka and kafka-python send 13, aiokafka 5;
    # v10+ carry topic ids, which Fetch v13+ needs.
    3: (0, 13),
    # OffsetCommit: kio's (Kafka 4's) floor is 2, which still overlaps librdkafka's
    # BrokerBalancedConsumer probe (1..2), so subscribe() stays enabled even in
    # librdkafka 2.0.2. Max 9 = librdkafka 2.16's; v10 names topics by id.
    8: (2, 9),
    # OffsetFetch: min 1 is both Kafka 4's floor and librdkafka's probe (1..1);
    # v8+ batch groups (kafka-python admin, librdkafka 2.16 sends 9); v10 uses topic ids.
    9: (1, 9),
    # FindCoordinator: librdkafka enables LZ4 and group coordination only if v0 is
    # advertised; kafka-python sends 6 (batched keys), aiokafka 1.
    10: (0, 6),
    # JoinGroup, Heartbeat, LeaveGroup, SyncGroup: librdkafka's balanced-consumer
    # probe needs v0 of each (Kafka 4 kept them for that); all of kio's range.
    # librdkafka 2.16 sends JoinGroup 5 / SyncGroup 3, kafka-python JoinGroup 7;
    # v4+ of JoinGroup use MEMBER_ID_REQUIRED, v5+ static membership, LeaveGroup v3+
    # batches members.
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    # DescribeGroups: all of it; v6 answers GROUP_ID_NOT_FOUND for unknown groups.
    15: (0, 6),
    # ListGroups: all of it; v4 filters by state, v5 by type.
    16: (0, 5),
    # SaslHandshake: v0 has the tokens follow bare (length-prefixed), v1 in
    # SaslAuthenticate requests, which current clients use.
    17: (0, 1),
    # ApiVersions: v0 is librdkafka's ApiVersion probe and aiokafka's request;
    # v3/v4 are the flexible ones librdkafka and kafka-python open with.
    18: (0, 4),
    # CreateTopics: Kafka 4's floor is 2 (kio's too); v5+ flexible and echo configs,
    # v7 returns topic ids.
    19: (2, 7),
    # DeleteTopics: Kafka 4's floor 1; v6 may name topics by id.
    20: (1, 6),
    # DeleteRecords: everything Kafka has; no client needs more than v2.
    21: (0, 2),
    # InitProducerId: min 0 is librdkafka's IdempotentProducer probe; max 4 stops
    # before v5/v6 (transaction-v2 errors and two-phase-commit fields).
    22: (0, 4),
    # OffsetForLeaderEpoch: Kafka 4's floor 2; librdkafka validates positions with it.
    23: (2, 4),
    # AddPartitionsToTxn: v0-v3 are the clients' (one transaction each; librdkafka
    # sends 0, kafka-python at most 3); v4 is what a broker sends another to verify
    # a transactional produce (KIP-890). AddOffsetsToTxn, EndTxn, TxnOffsetCommit:
    # up to the versions before transaction-v2 (KIP-890 part 2), as InitProducerId.
    24: (0, 4),
    25: (0, 3),
    26: (0, 4),
    # WriteTxnMarkers: a coordinator's markers to a partition's leader (Kafka 4's
    # floor 1; v2 carries the transaction version of KIP-890 part 2).
    27: (1, 1),
    28: (0, 4),
    # DescribeConfigs: Kafka 4's floor 1.
    # DescribeAcls, CreateAcls, DeleteAcls: Kafka 4's range (v1 added prefixed patterns);
    # answered SECURITY_DISABLED with no authorizer, as Kafka answers
    29: (1, 3),
    30: (1, 3),
    31: (1, 3),
    32: (1, 4),
    # AlterConfigs: Kafka 4's range; replaces a topic's overrides (the admin CLI and
    # older tools); broker settings are static here (server.properties + SIGHUP).
    33: (0, 2),
    # DescribeLogDirs: Kafka 4.0's range (v4 adds the volume's total and usable
    # bytes); kafka-python's describe_log_dirs sends up to 5, whose cordoning we lack.
    35: (1, 4),
    # SaslAuthenticate: all of it (v1 adds the session lifetime, 0 here: no
    # re-authentication; v2 is flexible).
    36: (0, 2),
    # CreatePartitions: all of it.
    37: (0, 3),
    # DeleteGroups: all of it.
    42: (0, 2),
    # ElectLeaders: all of it (v1 adds the election type, v2 is flexible); what
    # kafka-python's elect_leaders and librdkafka's ElectLeaders send.
    43: (0, 2),
    # IncrementalAlterConfigs: what current admin clients (kafka-configs, AdminClient)
    # send to change a topic's settings.
    44: (0, 1),
    # AlterPartitionReassignments, ListPartitionReassignments: all of them (v1 of
    # Alter may forbid changing a replication factor); kafka-reassign-partitions
    # and kafka-python's admin client use them.
    45: (0, 1),
    46: (0, 0),
    # OffsetDelete: all of it (only v0 exists).
    47: (0, 0),
    # DescribeUserScramCredentials, AlterUserScramCredentials: all of them (only
    # v0 exists); what confluent-kafka's and Kafka's admin clients send.
    50: (0, 0),
    51: (0, 0),
    # DescribeCluster: all of it (v2's fenced flag is always false here).
    60: (0, 2),
    # DescribeProducers: all of it (only v0 exists): the partition leader's active
    # producers and their open transactions (kafka-transactions describe-producers).
    61: (0, 0),
    # DescribeTransactions, ListTransactions: kafka-transactions describe / list
    # (v1 of List adds the running-time filter).
    65: (0, 0),
    66: (0, 1),
    # ConsumerGroupHeartbeat, ConsumerGroupDescribe: the consumer group protocol
    # (KIP-848, group.protocol=consumer); v1 has the client make its member id and
    # may subscribe by regex. librdkafka 2.16 sends v1 of the heartbeat, and only v1.
    68: (0, 1),
    69: (0, 1),
})


def api_versions_response(request_version: int,
                          supported: MappingProxyType[int, tuple[int, int]] = SUPPORTED_VERSIONS,
                          throttle_ms: int = 0) -> Payload:
    """The kio ApiVersionsResponse for a supported ApiVersions request version."""
    return _build(request_version, ErrorCode.none, sorted(supported.items()), throttle_ms)


def unsupported_api_versions_response(
        supported: MappingProxyType[int, tuple[int, int]] = SUPPORTED_VERSIONS) -> Payload:
    """Answer to an ApiVersions request whose version we do not know: v0, error 35,
    listing only ApiVersions' own range so the client retries with one we do."""
    return _build(0, ErrorCode.unsupported_version, [(API_VERSIONS, supported[API_VERSIONS])], 0)


def _build(version: int, error: ErrorCode, ranges: list[tuple[int, tuple[int, int]]],
           throttle_ms: int) -> Payload:
    cls = response_type(API_VERSIONS, version)
    assert cls is not None, f"kio has no ApiVersions v{version}"
    api_version_cls = importlib.import_module(cls.__module__).ApiVersion
    kwargs = {
        "error_code": error,
        "api_keys": tuple(api_version_cls(api_key=i16(key), min_version=i16(lo), max_version=i16(hi))
                          for key, (lo, hi) in ranges),
    }
    if "throttle_time" in {f.name for f in dataclasses.fields(cls)}:  # v1+
        kwargs["throttle_time"] = i32Timedelta.parse(datetime.timedelta(milliseconds=throttle_ms))
    return cls(**kwargs)
