"""A bounds check of a request body, run before kio's native decoder sees it.

kio's native decoder trusts declared lengths: it allocates an array as long as
the count in front of it says before reading a single element, so 31 bytes
declaring a compact array of 2^32 - 1 entries abort the whole process (an
allocation failure in native code is not an exception).  This module walks the
same schema (kio's dataclasses) in Python and checks every declared length
against the bytes that remain, so that the native decoder only ever sees
bodies whose every count is backed by data.

What it checks, for each field in wire order:

* fixed-size fields (int8 ... int64, uuid) fit in what remains;
* strings and byte fields: the declared length fits (-1 / compact 0 is null,
  allowed only where the schema says nullable);
* arrays: null only where nullable, and count x the smallest possible element
  fits, then every element in turn;
* tagged-field sections (flexible versions): every tag's size fits, the value
  of a tag the schema knows is checked within that size, and tags arrive in
  increasing order.  A tag the schema does not know is reported, so that the
  caller can drop it (KIP-482: unknown tags are ignored).

It does not decode values (UTF-8, uuids, ...): the native decoder does that,
and its ordinary errors are exceptions.  The result is ``MalformedRequest`` or
the list of unknown tagged fields found, as (start, end) spans of the section
holding them and the bytes that section should be with them left out.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Callable
from functools import cache
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field
from kio.serial._introspect import get_field_tag, get_schema_field_type

from .exceptions import MalformedRequest
from .header import read_uvarint, write_uvarint

_int16 = struct.Struct(">h")
_int32 = struct.Struct(">i")

# bytes on the wire of each fixed-size kafka_type
_FIXED = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_SIZED = ("string", "bytes", "records")

# A step checks one field at ``pos`` in ``buf[:end]`` and returns where the next
# field starts.  ``edits`` collects unknown tagged fields to drop.
Step = Callable[[memoryview, int, int, list], int]


class _Checker:
    """The compiled check of one entity: its steps and its smallest size."""

    __slots__ = ("steps", "min_size", "flexible", "tags")

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.min_size = 0
        self.flexible = False
        self.tags: dict[int, Step] = {}

    def __call__(self, buf: memoryview, pos: int, end: int, edits: list) -> int:
        for step in self.steps:
            pos = step(buf, pos, end, edits)
        if self.flexible:
            pos = _tagged_section(buf, pos, end, edits, self.tags)
        return pos


def check_body(entity_type: type, buf: bytes | memoryview, pos: int) -> list[tuple[int, int, bytes]]:
    """Check the body of ``entity_type`` at ``buf[pos:]``; raise MalformedRequest
    if any declared length outruns the data.  Returns the edits that drop
    unknown tagged fields (usually none)."""
    edits: list[tuple[int, int, bytes]] = []
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    _checker(entity_type)(view, pos, len(view), edits)
    return edits


def apply_edits(buf: bytes | memoryview, edits: list[tuple[int, int, bytes]]) -> bytes:
    """``buf`` with each (start, end) span replaced by its bytes."""
    out, last = bytearray(), 0
    for start, end, replacement in sorted(edits):
        out += buf[last:start]
        out += replacement
        last = end
    out += buf[last:]
    return bytes(out)


# --- compiling a schema into steps ------------------------------------------------
@cache
def _checker(entity_type: type) -> _Checker:
    checker = _Checker()
    checker.flexible = entity_type.__flexible__
    fixed_run = 0  # consecutive fixed-size fields are checked as one step
    for field in dataclasses.fields(entity_type):
        step, size, fixed = _field_step(field, checker.flexible)
        tag = get_field_tag(field)
        if tag is not None:
            checker.tags[int(tag)] = step
            continue
        checker.min_size += size
        if fixed:
            fixed_run += size
            continue
        if fixed_run:
            checker.steps.append(_skip(fixed_run))
            fixed_run = 0
        checker.steps.append(step)
    if fixed_run:
        checker.steps.append(_skip(fixed_run))
    if checker.flexible:
        checker.min_size += 1  # the tag count
    return checker


def _field_step(field: dataclasses.Field, flexible: bool) -> tuple[Step, int, bool]:
    """(step, smallest wire size, whether fixed-size) for one field."""
    nullable = _nullable(field.type)
    shape = classify_field(field)
    if isinstance(shape, EntityTupleField):
        inner = _checker(shape.type_)
        return _array(inner, max(inner.min_size, 1), flexible, nullable), 1 if flexible else 4, False
    if isinstance(shape, EntityField):
        return _entity(_checker(shape.type_), nullable), 1 if nullable else _checker(shape.type_).min_size, False
    kafka_type = get_schema_field_type(field)
    if isinstance(shape, PrimitiveTupleField):
        element, element_size, _ = _primitive(kafka_type, flexible, nullable=False)
        return _array(element, element_size, flexible, nullable), 1 if flexible else 4, False
    return _primitive(kafka_type, flexible, nullable)


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> tuple[Step, int, bool]:
    if kafka_type in _FIXED:
        size = _FIXED[kafka_type]
        return _skip(size), size, True
    if kafka_type in _SIZED:
        if flexible:
            return _compact_sized(nullable), 1, False
        width = 2 if kafka_type == "string" else 4
        return _legacy_sized(width, nullable), width, False
    raise TypeError(f"no bounds check for kafka_type {kafka_type!r}")


def _nullable(field_type) -> bool:
    return get_origin(field_type) in (UnionType, Union) and NoneType in get_args(field_type)


# --- the steps --------------------------------------------------------------------
def _truncated(what: str, pos: int) -> MalformedRequest:
    return MalformedRequest(f"request truncated in {what} at byte {pos}")


def _skip(size: int) -> Step:
    def step(buf, pos, end, edits):
        pos += size
        if pos > end:
            raise _truncated(f"a {size}-byte field", pos - size)
        return pos
    return step


def _compact_sized(nullable: bool) -> Step:
    def step(buf, pos, end, edits):
        start = pos
        length, pos = read_uvarint(buf, pos)
        if length == 0:
            if not nullable:
                raise MalformedRequest(f"null at byte {start} where the schema allows none")
            return pos
        pos += length - 1
        if pos > end:
            raise _truncated(f"a string of {length - 1} bytes", start)
        return pos
    return step


def _legacy_sized(width: int, nullable: bool) -> Step:
    unpack = (_int16 if width == 2 else _int32).unpack_from

    def step(buf, pos, end, edits):
        if pos + width > end:
            raise _truncated("a length", pos)
        (length,) = unpack(buf, pos)
        start, pos = pos, pos + width
        if length < 0:
            if length != -1 or not nullable:
                raise MalformedRequest(f"length {length} at byte {start} is not allowed here")
            return pos
        pos += length
        if pos > end:
            raise _truncated(f"a string of {length} bytes", start)
        return pos
    return step


def _array(element: Step, element_size: int, flexible: bool, nullable: bool) -> Step:
    def step(buf, pos, end, edits):
        start = pos
        if flexible:
            count, pos = read_uvarint(buf, pos)
            count -= 1  # compact: n + 1, 0 for null
        else:
            if pos + 4 > end:
                raise _truncated("an array length", pos)
            (count,) = _int32.unpack_from(buf, pos)
            pos += 4
        if count < 0:
            if count != -1 or not nullable:
                raise MalformedRequest(f"array length {count} at byte {start} is not allowed here")
            return pos
        if count * element_size > end - pos:
            raise MalformedRequest(f"array of {count} entries at byte {start} is longer than the "
                                   f"{end - pos} bytes left")
        for _ in range(count):
            pos = element(buf, pos, end, edits)
        return pos
    return step


def _entity(checker: _Checker, nullable: bool) -> Step:
    def step(buf, pos, end, edits):
        if nullable:
            if pos >= end:
                raise _truncated("a struct marker", pos)
            marker = buf[pos] if buf[pos] < 128 else buf[pos] - 256
            pos += 1
            if marker < 0:
                return pos
        return checker(buf, pos, end, edits)
    return step


def _tagged_section(buf, pos: int, end: int, edits: list, known: dict[int, Step]) -> int:
    """A flexible struct's tagged fields: count, then (tag, size, value) each."""
    section = pos
    count, pos = read_uvarint(buf, pos)
    if count > end - pos:
        raise MalformedRequest(f"{count} tagged fields at byte {section} in {end - pos} bytes")
    kept, unknown, last_tag = [], False, -1
    for _ in range(count):
        field_start = pos
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if tag <= last_tag:
            raise MalformedRequest(f"tagged field {tag} at byte {field_start} is out of order")
        last_tag = tag
        value_end = pos + size
        if value_end > end:
            raise _truncated(f"tagged field {tag}", field_start)
        step = known.get(tag)
        if step is None:
            unknown = True
        else:
            nested: list = []
            step(buf, pos, value_end, nested)
            if nested:  # dropping it would change the size of the tag around it
                raise MalformedRequest(f"unknown tagged field inside tagged field {tag}")
            kept.append(bytes(buf[field_start:value_end]))
        pos = value_end
    if unknown:
        edits.append((section, pos, write_uvarint(len(kept)) + b"".join(kept)))
    return pos

