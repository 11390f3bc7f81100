"""An error answer for any request, built from the request itself.

When a handler fails unexpectedly Kafka does not hang up: it answers the
request with an error code in every place the response has one, echoing what
the request named (each topic, each partition, each group), so that a client
knows which of its items failed and retries or gives up as that code says.
This builds such a response from kio's response schema for any api key and
version:

* every ``error_code`` field gets the error, ``error_message`` the message;
* an array of the response mirrors the request's array at the same depth
  (Produce ``topic_data``/``partition_data`` -> ``responses``/``partition_responses``),
  copying the fields that identify an entry (name, topic id, partition index,
  group id, key, ...);
* everything else is its schema default, or -1 / 0 / empty / null.

Fetch (written by hand for sendfile) and ApiVersions (answered before any
handler) are not built here.
"""

from __future__ import annotations

import dataclasses
import datetime
import uuid
from types import SimpleNamespace

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from hpbroker.errors import ErrorCode

from .schemas import is_nullable, response_type

# request field -> the response fields that echo it
_ALIASES = {
    "name": ("name", "topic", "topic_name"),
    "topic": ("name", "topic", "topic_name"),
    "index": ("index", "partition_index", "partition"),
    "partition_index": ("index", "partition_index", "partition"),
    "partition": ("index", "partition_index", "partition"),
    "group_id": ("group_id",),
    "key": ("key",),
    "topic_id": ("topic_id",),
    "resource_type": ("resource_type",),
    "resource_name": ("resource_name",),
    "member_id": ("member_id",),
    "group_instance_id": ("group_instance_id",),
}
_NEGATIVE = ("offset", "epoch", "leader", "node_id", "producer_id", "timestamp", "watermark", "generation_id",
             "port")


def error_response(api_key: int, api_version: int, request, error: ErrorCode, message: str | None = None):
    """A kio response object answering ``request`` with ``error`` everywhere."""
    schema = response_type(api_key, api_version)
    assert schema is not None, f"kio has no api key {api_key} v{api_version}"  # the request decoded
    as_kio = getattr(request, "as_kio", None)  # a request decoded by hand (Produce): its fields as kio's schema
    return _build(schema, as_kio() if as_kio is not None else request, error, message)


def _build(entity_type: type, source, error: ErrorCode, message: str | None):
    values = {}
    for field in dataclasses.fields(entity_type):
        value = _value(field, source, error, message)
        if value is not dataclasses.MISSING:
            values[field.name] = value
    return entity_type(**values)


def _value(field: dataclasses.Field, source, error: ErrorCode, message: str | None):
    name = field.name
    shape = classify_field(field)
    if name == "error_code":
        return error
    if name == "error_message":
        return message
    if isinstance(shape, EntityTupleField):
        return tuple(_build(shape.type_, item, error, message) for item in _mirrored(shape.type_, source))
    if isinstance(shape, EntityField):
        return None if is_nullable(field.type) else _build(shape.type_, None, error, message)
    if isinstance(shape, PrimitiveTupleField):
        return ()
    echoed = _echo(name, source)
    if echoed is not dataclasses.MISSING:
        return echoed
    if field.default is not dataclasses.MISSING or get_field_tag(field) is not None:
        return dataclasses.MISSING  # the schema's default (tagged fields have one)
    if is_nullable(field.type):
        return None
    return _empty(get_schema_field_type(field), name)


def _mirrored(element_type: type, source) -> list:
    """The entries of ``source``'s array that a response array of
    ``element_type`` answers: the first array it holds."""
    if source is None or not dataclasses.is_dataclass(source):
        return []
    for field in dataclasses.fields(source):
        items = getattr(source, field.name)
        shape = classify_field(field)
        if items is None:
            continue
        if isinstance(shape, EntityTupleField):
            return list(items)
        if field.name == "topic_names":  # DeleteTopics before v6 names its topics in a list of strings
            return [SimpleNamespace(name=item) for item in items]
    return []


def _echo(name: str, source):
    if source is None:
        return dataclasses.MISSING
    for request_name, response_names in _ALIASES.items():
        if name in response_names and hasattr(source, request_name):
            return getattr(source, request_name)
    return dataclasses.MISSING


def _empty(kafka_type: str, name: str):
    if kafka_type in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        return -1 if any(part in name for part in _NEGATIVE) else 0
    return {
        "bool": False, "float64": 0.0, "string": "", "bytes": b"", "records": b"",
        "uuid": uuid.UUID(int=0), "error_code": ErrorCode.none,
        "timedelta_i32": datetime.timedelta(0), "timedelta_i64": datetime.timedelta(0),
        "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
    }[kafka_type]
