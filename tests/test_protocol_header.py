"""Request headers v0/v1/v2 byte by byte, response headers v0/v1, and which applies when."""

import struct

import pytest

from hpbroker.protocol import MalformedRequest, RequestHeader, encode_response_header, parse_request_header
from hpbroker.protocol.header import read_uvarint, write_uvarint
from hpbroker.protocol.schemas import request_header_version, response_header_version

PREFIX = struct.pack(">hhi", 3, 12, 0x01020304)


def test_v0_is_the_fixed_prefix():
    header, pos = parse_request_header(PREFIX + b"body", 0)
    assert header == RequestHeader(3, 12, 0x01020304, None, 0)
    assert pos == 8


def test_v1_adds_an_int16_client_id():
    header, pos = parse_request_header(PREFIX + b"\x00\x03abc" + b"body", 1)
    assert header.client_id == "abc" and header.header_version == 1
    assert pos == 13


def test_v1_null_and_empty_client_id():
    assert parse_request_header(PREFIX + b"\xff\xff", 1)[0].client_id is None
    assert parse_request_header(PREFIX + b"\x00\x00", 1)[0].client_id == ""


def test_v2_keeps_the_int16_client_id_then_tagged_fields():
    data = PREFIX + b"\x00\x02id" + b"\x00" + b"body"
    header, pos = parse_request_header(data, 2)
    assert header.client_id == "id" and header.header_version == 2
    assert data[pos:] == b"body"


def test_v2_unknown_header_tags_are_skipped():
    tags = b"\x02" + b"\x00\x02\xaa\xbb" + b"\x05\x00"  # tag 0 (2 bytes), tag 5 (empty)
    data = PREFIX + b"\x00\x01x" + tags + b"body"
    header, pos = parse_request_header(data, 2)
    assert data[pos:] == b"body"


def test_utf8_client_id():
    name = "producer-é".encode()
    header, _ = parse_request_header(PREFIX + struct.pack(">h", len(name)) + name, 1)
    assert header.client_id == "producer-é"


@pytest.mark.parametrize("data,version", [
    (PREFIX[:7], 0),
    (PREFIX + b"\x00", 1),                  # half a length
    (PREFIX + b"\x00\x05ab", 1),            # client id cut short
    (PREFIX + b"\xff\xfe", 1),              # negative length other than -1
    (PREFIX + b"\x00\x01\xff", 1),          # not UTF-8
    (PREFIX + b"\x00\x00", 2),              # tag section missing
    (PREFIX + b"\x00\x00\x01\x00\x05ab", 2),  # tag longer than the frame
    (PREFIX + b"\x00\x00\xff\xff\xff\xff\xff\x01", 2),  # varint over 5 bytes
])
def test_truncated_or_garbled_headers_are_malformed(data, version):
    with pytest.raises(MalformedRequest):
        parse_request_header(data, version)


def test_response_headers():
    assert encode_response_header(7, 0) == b"\x00\x00\x00\x07"
    assert encode_response_header(7, 1) == b"\x00\x00\x00\x07\x00"


@pytest.mark.parametrize("api_key,version,request_hv,response_hv", [
    (0, 0, 1, 0), (0, 2, 1, 0), (0, 8, 1, 0), (0, 9, 2, 1),      # Produce flexible from 9
    (1, 11, 1, 0), (1, 12, 2, 1),                                # Fetch flexible from 12
    (3, 8, 1, 0), (3, 9, 2, 1),                                  # Metadata flexible from 9
    (18, 2, 1, 0), (18, 3, 2, 0), (18, 4, 2, 0),                 # ApiVersions: response always v0
    (60, 0, 2, 1),                                               # DescribeCluster born flexible
])
def test_header_versions_follow_flexibility(api_key, version, request_hv, response_hv):
    assert request_header_version(api_key, version) == request_hv
    assert response_header_version(api_key, version) == response_hv


@pytest.mark.parametrize("data, message", [
    (b"\x05\x81", "unsigned varint at byte 1 is cut off after 1 byte(s)"),
    (b"\x80\x80\x80\x80\x80\x00", "unsigned varint at byte 0 is longer than 5 bytes"),
    (b"\xff\xff\xff\xff\x1f", "unsigned varint at byte 0 does not fit in 32 bits"),
])
def test_bad_varints_are_malformed_requests_that_say_where(data, message):
    pos = 1 if data[0] == 5 else 0
    with pytest.raises(MalformedRequest) as info:
        read_uvarint(data, pos)
    assert str(info.value) == message


def test_varints_of_one_and_several_bytes():
    assert read_uvarint(b"\x00\x7f", 1) == (127, 2)
    assert read_uvarint(b"\xac\x02", 0) == (300, 2)
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (0xFFFFFFFF, 5)
    assert write_uvarint(300) == b"\xac\x02"
