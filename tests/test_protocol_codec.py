"""decode_request / encode_response: round trips at every advertised version, the
error types, Produce v0-v2 and the ApiVersions fallback."""

import io
import struct

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.types import TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import Records

from hpbroker.errors import ErrorCode
from hpbroker.protocol import (
    SUPPORTED_VERSIONS,
    FrameReader,
    MalformedRequest,
    RequestHeader,
    UnsupportedApiKey,
    UnsupportedVersion,
    api_versions_response,
    decode_request,
    encode_response,
    request_type,
    response_type,
    unsupported_api_versions_response,
)
from hpbroker.protocol.produce_request import ProduceRequest
from hpbroker.protocol.schemas import request_header_version, response_header_version

st.register_type_strategy(Records, st.binary(max_size=40).map(Records))

ADVERTISED = [(k, v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)]
# hypothesis leaves HealthCheckMeta.__iter__ unannotated, so pyright reads this as a list of the metaclass.
ALL_HEALTH_CHECKS: list[HealthCheck] = list(HealthCheck)  # pyright: ignore[reportAssignmentType]


def kio_bytes(obj) -> bytes:
    out = io.BytesIO()
    entity_writer(type(obj))(out, obj)
    return out.getvalue()


def request_frame(api_key, version, obj, correlation_id=9, client_id=b"cid") -> bytes:
    """A request frame (no size prefix) written independently of our header parser."""
    head = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    if request_header_version(api_key, version) == 2:
        head += b"\x00"
    body = kio_bytes(obj)
    if api_key == 0 and version < 3:
        body = body[2:]  # v0-v2 have no transactional_id (ours is null: 0xFFFF)
    return head + body


@pytest.mark.parametrize("api_key,version", ADVERTISED)
def test_every_advertised_request_version_round_trips(api_key, version):
    schema = request_type(api_key, version)
    assert schema is not None
    strategy = st.from_type(schema)
    if api_key == 0 and version < 3:
        strategy = strategy.filter(lambda r: r.transactional_id is None)

    @settings(max_examples=8, deadline=None, suppress_health_check=ALL_HEALTH_CHECKS)
    @given(strategy)
    def check(request):
        try:
            header, got = decode_request(request_frame(api_key, version, request))
        except MalformedRequest as exc:
            # kio's native reader cannot hold int64 millisecond durations past
            # timedelta's range (its encoder can); real clients send -1 there.
            assume("timedelta" not in str(exc))
            raise
        assert header == RequestHeader(api_key, version, 9, "cid", request_header_version(api_key, version))
        # Produce is read by hand into tuples of kio's field names (``produce_request.py``)
        assert (got.as_kio() if isinstance(got, ProduceRequest) else got) == request

    check()


@pytest.mark.parametrize("api_key,version", [kv for kv in ADVERTISED if not (kv[0] == 0 and kv[1] < 3)])
def test_every_advertised_response_version_round_trips(api_key, version):
    schema = response_type(api_key, version)
    assert schema is not None

    @settings(max_examples=6, deadline=None, suppress_health_check=ALL_HEALTH_CHECKS)
    @given(st.from_type(schema))
    def check(response):
        data = encode_response(RequestHeader(api_key, version, 77, None, 1), response)
        assert struct.unpack_from(">ii", data) == (len(data) - 4, 77)
        body = 8 + response_header_version(api_key, version)  # v1 adds one empty-tags byte
        try:
            got, size = entity_reader(type(response))(data, body)
        except ValueError as exc:
            # kio's reader cannot hold int64 millisecond durations past timedelta's
            # range (SaslAuthenticate's session lifetime; its encoder can)
            assume("timedelta" not in str(exc))
            raise
        assert body + size == len(data)
        # compared as bytes: a datetime in a repeated hour of its zone (a DST fall-back)
        # never equals one in another zone (PEP 495), though both name the instant the
        # wire carries, which is all a response holds
        assert encode_response(RequestHeader(api_key, version, 77, None, 1), got) == data

    check()


def _metadata_request_frame():
    request = MetadataRequest(topics=(MetadataRequestTopic(topic_id=None, name=TopicName("t")),),
                              allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    return request_frame(3, 12, request)


def test_every_truncation_is_malformed():
    data = _metadata_request_frame()
    for cut in range(len(data)):
        with pytest.raises(MalformedRequest):
            decode_request(data[:cut])


def test_garbage_body_is_malformed_never_an_index_or_struct_error():
    head = struct.pack(">hhih", 3, 12, 1, -1) + b"\x00"
    for body in (b"\xff" * 12, b"\x80" * 8, b"\x05\x01", b"\x02\x01" + b"\x00" * 16 + b"\x03\xff\xfe"):
        with pytest.raises(MalformedRequest):
            decode_request(head + body)


def test_trailing_bytes_are_ignored_like_kafka():
    header, request = decode_request(_metadata_request_frame() + b"extra")
    assert isinstance(request, MetadataRequest) and request.topics is not None
    assert request.topics[0].name == "t"


def test_unknown_api_key_is_its_own_error_and_keeps_the_header():
    data = struct.pack(">hhih", 999, 0, 5, 2) + b"me"
    with pytest.raises(UnsupportedApiKey) as info:
        decode_request(data)
    assert info.value.header == RequestHeader(999, 0, 5, "me", 1)


def test_known_key_we_do_not_serve_is_unsupported_api_key():
    with pytest.raises(UnsupportedApiKey):
        decode_request(struct.pack(">hhih", 48, 0, 5, -1))  # DescribeClientQuotas: not served


@pytest.mark.parametrize("api_key,version", [(18, 5), (18, -1), (1, 3), (1, 17), (0, 11), (2, 0)])
def test_unsupported_version_is_its_own_error(api_key, version):
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(struct.pack(">hhih", api_key, version, 5, 3) + b"cli")
    assert info.value.header.correlation_id == 5
    assert info.value.header.client_id == "cli"
    assert (info.value.min_version, info.value.max_version) == SUPPORTED_VERSIONS[api_key]


def test_unsupported_api_versions_answer_is_v0_error_35_with_its_own_range():
    # A future client opening with ApiVersions v9: flexible header, body we cannot read.
    data = struct.pack(">hhih", 18, 9, 42, 1) + b"c" + b"\x00" + b"\x00\x00"
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(data)
    frame = encode_response(info.value.header, unsupported_api_versions_response())
    expected_body = struct.pack(">hihhh", 35, 1, 18, 0, 4)  # error, [ApiVersion(18, 0, 4)]
    assert frame == struct.pack(">ii", 4 + len(expected_body), 42) + expected_body


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_response_header_is_always_v0(version):
    frame = encode_response(RequestHeader(18, version, 3, None, 2), api_versions_response(version))
    # Right after the correlation id comes error_code 0, not a tagged-field byte.
    assert frame[4:10] == struct.pack(">ih", 3, 0)
    schema = response_type(18, version)
    assert schema is not None
    got, _ = entity_reader(schema)(frame, 8)
    assert {a.api_key: (a.min_version, a.max_version) for a in got.api_keys} == dict(SUPPORTED_VERSIONS)
    assert got.error_code == ErrorCode.none


def test_response_must_match_the_request():
    response = api_versions_response(3)
    with pytest.raises(ValueError):
        encode_response(RequestHeader(3, 3, 1, None, 1), response)  # wrong api key
    with pytest.raises(ValueError):
        encode_response(RequestHeader(18, 2, 1, None, 1), response)  # wrong version


def test_decode_from_splitter_memoryview():
    data = _metadata_request_frame()
    [frame] = FrameReader().feed(struct.pack(">i", len(data)) + data)
    header, request = decode_request(frame)
    assert isinstance(request, MetadataRequest) and request.topics is not None
    assert header.api_version == 12 and request.topics[0].name == "t"


def test_unknown_tags_in_a_body_are_ignored():
    # KIP-482: a tagged field the schema does not know is skipped (kio's own
    # reader would raise KeyError, so the bounds check drops them first).
    data = _metadata_request_frame()
    assert data.endswith(b"\x00")  # the body's own (empty) tag section
    _, plain = decode_request(data)
    _, tagged = decode_request(data[:-1] + b"\x02\x63\x01\xaa\x64\x00")  # tags 99 (1 byte) and 100 (empty)
    assert tagged == plain


def test_tags_out_of_order_are_malformed():
    data = _metadata_request_frame()
    with pytest.raises(MalformedRequest, match="out of order"):
        decode_request(data[:-1] + b"\x02\x64\x00\x63\x00")
