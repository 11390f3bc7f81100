"""A well-formed request frame for every advertised (api key, version), built
from kio's schemas: every array holds two entries, every nullable field a
value, every records field a real record batch.  The seeds of the fuzz tests,
next to the frames real clients send (tests/golden/requests.jsonl)."""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import uuid

from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
)

from hpbroker.protocol.header import write_uvarint
from hpbroker.protocol.schemas import (
    LEGACY_PRODUCE_MAX,
    PRODUCE,
    request_header_version,
    request_type,
    response_type,
)
from hpbroker.protocol.versions import SUPPORTED_VERSIONS
from hpbroker.records import Record, encode_batch

_BATCH = encode_batch([Record(0, 0, b"k", b"value"), Record(1, 1, None, b"v2")])


def request_schema(api_key: int, api_version: int) -> type:
    """``request_type`` of a version kio has: its request class (KeyError if kio has none)."""
    schema = request_type(api_key, api_version)
    if schema is None:
        raise KeyError(f"kio has no request for api key {api_key} v{api_version}")
    return schema


def response_schema(api_key: int, api_version: int) -> type:
    """``response_type`` of a version kio has: its response class (KeyError if kio has none)."""
    schema = response_type(api_key, api_version)
    if schema is None:
        raise KeyError(f"kio has no response for api key {api_key} v{api_version}")
    return schema


def _value(kafka_type: str):
    return {
        "bool": False, "int8": 1, "uint8": 1, "int16": 1, "uint16": 1, "int32": 1, "uint32": 1,
        "int64": 1, "uint64": 1, "float64": 1.0, "string": "t", "bytes": b"xy", "records": _BATCH,
        "uuid": uuid.UUID(int=1), "error_code": ErrorCode.none,
        "timedelta_i32": datetime.timedelta(milliseconds=100),
        "timedelta_i64": datetime.timedelta(milliseconds=100),
        "datetime_i64": datetime.datetime.fromtimestamp(1, datetime.UTC),
    }[kafka_type]


def sample_entity(entity_type: type):
    values = {}
    for field in dataclasses.fields(entity_type):
        shape = classify_field(field)
        if isinstance(shape, EntityTupleField):
            values[field.name] = (sample_entity(shape.type_), sample_entity(shape.type_))
        elif isinstance(shape, EntityField):
            values[field.name] = sample_entity(shape.type_)
        elif isinstance(shape, PrimitiveTupleField):
            values[field.name] = (_value(get_schema_field_type(field)),) * 2
        else:
            values[field.name] = _value(get_schema_field_type(field))
    return entity_type(**values)


def _header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    version = request_header_version(api_key, api_version)
    out = struct.pack(">hhi", api_key, api_version, correlation_id)
    if version >= 1:
        out += struct.pack(">h", 4) + b"fuzz"
    if version == 2:
        out += write_uvarint(0)
    return out


def sample_frame(api_key: int, api_version: int, correlation_id: int = 1) -> bytes:
    """One request (without its size prefix)."""
    return _header(api_key, api_version, correlation_id) + sample_body(api_key, api_version)


def sample_body(api_key: int, api_version: int) -> bytes:
    """The body of ``sample_frame``: what follows the request header."""
    schema = request_schema(api_key, api_version)
    request = sample_entity(schema)
    legacy = api_key == PRODUCE and api_version <= LEGACY_PRODUCE_MAX
    if legacy:
        request = dataclasses.replace(request, transactional_id=None)
    out = io.BytesIO()
    entity_writer(schema)(out, request)
    body = out.getvalue()
    if legacy:
        body = body[2:]  # v0-v2 lack v3's leading transactional_id (null: a 2-byte -1)
    return body


def all_samples() -> dict[tuple[int, int], bytes]:
    return {(key, version): sample_frame(key, version)
            for key, (low, high) in SUPPORTED_VERSIONS.items() for version in range(low, high + 1)}
