"""The advertised version table, Kafka's error codes, and the package's boundaries."""

import ast
import pathlib

import pytest
from kio.schema.errors import ErrorCode as KioErrorCode

from hpbroker.errors import ErrorCode
from hpbroker.protocol import SUPPORTED_VERSIONS, request_type, response_type

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "hpbroker" / "protocol"

# What each target client sends when we let it (observed on the wire), by api key.
OBSERVED = {
    "librdkafka 2.16": {3: 13, 0: 10, 1: 16, 2: 7, 11: 5, 14: 3, 8: 9, 9: 9},
    "kafka-python 3": {18: 4, 3: 13, 0: 9, 1: 12, 2: 11, 10: 6, 11: 7},
    "aiokafka 0.14": {18: 0, 3: 5, 0: 7, 1: 11, 2: 3, 10: 1},
}

# librdkafka enables a feature only if our range overlaps each of its probe ranges.
LIBRDKAFKA_PROBES = {
    "MsgVer2": {0: (3, 3), 1: (4, 4)},
    "ZSTD": {0: (7, 7), 1: (10, 10)},
    "LZ4": {10: (0, 0)},
    "IdempotentProducer": {22: (0, 0)},
    "OffsetTime": {2: (1, 1)},
    "ApiVersion": {18: (0, 0)},
    "BrokerGroupCoordinator": {10: (0, 0)},
    "BrokerBalancedConsumer": {10: (0, 0), 8: (1, 2), 9: (1, 1), 11: (0, 0), 14: (0, 0), 12: (0, 0), 13: (0, 0)},
}


@pytest.mark.parametrize("api_key", sorted(SUPPORTED_VERSIONS))
def test_every_advertised_version_has_schemas(api_key):
    low, high = SUPPORTED_VERSIONS[api_key]
    for version in range(low, high + 1):
        assert request_type(api_key, version) is not None, (api_key, version)
        assert response_type(api_key, version) is not None, (api_key, version)


@pytest.mark.parametrize("client", sorted(OBSERVED))
def test_clients_land_inside_the_ranges(client):
    for api_key, version in OBSERVED[client].items():
        low, high = SUPPORTED_VERSIONS[api_key]
        assert low <= version <= high, (client, api_key, version)


@pytest.mark.parametrize("feature", sorted(LIBRDKAFKA_PROBES))
def test_librdkafka_feature_probes_overlap(feature):
    for api_key, (probe_low, probe_high) in LIBRDKAFKA_PROBES[feature].items():
        low, high = SUPPORTED_VERSIONS[api_key]
        assert probe_low <= high and low <= probe_high, (feature, api_key)


def test_fixed_points_of_the_table():
    assert SUPPORTED_VERSIONS[0][0] == 0          # old librdkafka compresses only then
    assert SUPPORTED_VERSIONS[18] == (0, 4)
    assert SUPPORTED_VERSIONS[1][1] >= 13         # topic ids: librdkafka fetches with 16


def test_error_codes_spelled_as_kafka_spells_them():
    assert ErrorCode.unknown_topic_or_partition == 3
    assert ErrorCode.unsupported_version == 35
    assert ErrorCode.out_of_order_sequence_number == 45
    assert ErrorCode.invalid_producer_epoch == 47
    assert ErrorCode.unknown_topic_id == 100
    assert ErrorCode.unsupported_version is KioErrorCode.unsupported_version  # what kio's encoders need
    assert ErrorCode is KioErrorCode


def _imports(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_sans_io(path):
    """No I/O in the protocol layer (what it may import of hpbroker is
    tests/test_dependencies.py's business)."""
    for name in _imports(path):
        top = name.split(".")[0]
        assert top not in {"socket", "selectors", "asyncio", "os", "mmap"}, f"{path.name} imports {name}"
    assert "open(" not in path.read_text()
