"""The error answer to a failed request, for every advertised API and version
but Fetch (written by hand) and ApiVersions (answered before any handler)."""

import pytest

from harness.request_samples import all_samples
from hpbroker.protocol import ErrorCode, decode_request, encode_response
from hpbroker.protocol.error_response import error_response
from hpbroker.protocol.schemas import kio_version

SAMPLES = {kv: frame for kv, frame in all_samples().items() if kv[0] not in (1, 18)}


@pytest.mark.parametrize("api_key,version", sorted(SAMPLES))
def test_every_error_answer_encodes(api_key, version):
    header, request = decode_request(SAMPLES[(api_key, version)])
    response = error_response(api_key, kio_version(api_key, version), request, ErrorCode.unknown_server_error, "x")
    assert encode_response(header, response)


def test_the_answer_echoes_what_the_request_named():
    header, request = decode_request(SAMPLES[(2, 7)])  # ListOffsets: two topics "t" of two partitions 1
    response = error_response(2, 7, request, ErrorCode.kafka_storage_error)
    assert [t.name for t in response.topics] == ["t", "t"]
    assert {(p.partition_index, p.error_code, p.offset) for t in response.topics for p in t.partitions} == {
        (1, ErrorCode.kafka_storage_error, -1)}
    _, request = decode_request(SAMPLES[(20, 3)])  # DeleteTopics before v6: a list of names
    assert [(r.name, r.error_code) for r in error_response(20, 3, request, ErrorCode.kafka_storage_error).responses] \
        == [("t", ErrorCode.kafka_storage_error)] * 2


@pytest.mark.parametrize("version", [0, 3, 9])
def test_a_produce_read_by_hand_is_echoed_as_kio_reads_it(version):
    """Produce decodes into tuples (``produce_request.py``), not kio's classes:
    the error answer converts them and names every topic and partition."""
    header, request = decode_request(SAMPLES[(0, version)])  # two topics "t" of two partitions 1
    response = error_response(0, kio_version(0, version), request, ErrorCode.kafka_storage_error)
    assert [t.name for t in response.responses] == ["t", "t"]
    assert [(p.index, p.error_code) for t in response.responses for p in t.partition_responses] == [
        (1, ErrorCode.kafka_storage_error)] * 4
    assert encode_response(header, response)
