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
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
)

from .exceptions import MalformedRequest
from .header import read_uvarint, write_uvarint
from .schemas import is_nullable

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

# A check takes the buffer, where to start and where the data ends, and the
# list that collects unknown tagged fields to drop; it returns where the next
# field starts.
Check = Callable[[memoryview, int, int, list], int]


def check_body(entity_type: type, buf: bytes | memoryview, pos: int) -> list[tuple[int, int, bytes]]:
    """Check the body of ``entity_type`` at ``buf[pos:]``; raise MalformedRequest
    if any declared length outruns the data.  Returns the edits that drop
    unknown tagged fields (usually none)."""
    edits: list[tuple[int, int, bytes]] = []
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    _compiled(entity_type).check(view, pos, len(view), edits)
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


# --- compiling a schema -----------------------------------------------------------
# Each struct becomes one generated Python function with its fields checked in
# line: walking a 16-partition Produce with a function call per field cost ten
# times what kio's native decoder takes for the whole request.
class _Compiled:
    __slots__ = ("check", "min_size")

    def __init__(self, check: Check, min_size: int):
        self.check = check
        self.min_size = min_size


class _Source:
    """Lines of one generated function and the names they refer to."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, object] = {"read_uvarint": read_uvarint, "unpack16": _int16.unpack_from,
                                         "unpack32": _int32.unpack_from, "Malformed": MalformedRequest,
                                         "truncated": _truncated, "tagged_section": _tagged_section}

    def add(self, indent: int, *lines: str) -> None:
        self.lines.extend("    " * indent + line for line in lines)

    def name(self, value: object) -> str:
        key = f"n{len(self.names)}"
        self.names[key] = value
        return key

    def function(self, label: str) -> Check:
        code = "def check(buf, pos, end, edits):\n" + "\n".join(self.lines) + "\n    return pos\n"
        namespace: dict[str, Any] = dict(self.names)
        exec(compile(code, f"<bounds check of {label}>", "exec"), namespace)
        return namespace["check"]


@cache
def _compiled(entity_type: type) -> _Compiled:
    flexible = entity_type.__flexible__
    source = _Source()
    tags: dict[int, Check] = {}
    min_size = 1 if flexible else 0  # the tag count
    fixed_run = 0  # consecutive fixed-size fields are checked as one
    for field in dataclasses.fields(entity_type):
        tag = get_field_tag(field)
        if tag is not None:
            tags[int(tag)] = _field_function(field, flexible, f"{entity_type.__name__}.{field.name}")
            continue
        size, fixed = _field_size(field, flexible)
        min_size += size
        if fixed:
            fixed_run += size
            continue
        if fixed_run:
            _emit_fixed(source, 1, fixed_run)
            fixed_run = 0
        _emit_field(source, 1, field, flexible)
    if fixed_run:
        _emit_fixed(source, 1, fixed_run)
    if flexible:
        known = source.name(tags)
        source.add(1, "if pos < end and buf[pos] == 0:  # no tagged fields: nearly always",
                   "    return pos + 1",
                   f"pos = tagged_section(buf, pos, end, edits, {known})")
    return _Compiled(source.function(entity_type.__name__), min_size)


def _field_function(field: dataclasses.Field, flexible: bool, label: str) -> Check:
    """The check of one field alone (a tagged field's value)."""
    source = _Source()
    _emit_field(source, 1, field, flexible)
    return source.function(label)


def _field_size(field: dataclasses.Field, flexible: bool) -> tuple[int, bool]:
    """(smallest wire size, whether that is its only size)."""
    shape = classify_field(field)
    if isinstance(shape, (EntityTupleField, PrimitiveTupleField)):
        return (1 if flexible else 4), False
    if isinstance(shape, EntityField):
        return (1 if is_nullable(field.type) else _compiled(shape.type_).min_size), False
    kafka_type = get_schema_field_type(field)
    if kafka_type in _FIXED:
        return _FIXED[kafka_type], True
    if kafka_type in _SIZED:
        return (1 if flexible else 2 if kafka_type == "string" else 4), False
    raise TypeError(f"no bounds check for kafka_type {kafka_type!r}")


def _emit_field(source: _Source, indent: int, field: dataclasses.Field, flexible: bool) -> None:
    nullable = is_nullable(field.type)
    shape = classify_field(field)
    if isinstance(shape, EntityTupleField):
        element = _compiled(shape.type_)
        check = source.name(element.check)
        _emit_count(source, indent, flexible, nullable, max(element.min_size, 1))
        source.add(indent + 1, "for _ in range(n):", f"    pos = {check}(buf, pos, end, edits)")
    elif isinstance(shape, PrimitiveTupleField):
        kafka_type = get_schema_field_type(field)
        size = _FIXED.get(kafka_type)
        _emit_count(source, indent, flexible, nullable, size or 1)
        if size:
            source.add(indent + 1, f"pos += n * {size}")
        else:
            source.add(indent + 1, "for _ in range(n):")
            _emit_sized(source, indent + 2, kafka_type, flexible, nullable=False)
    elif isinstance(shape, EntityField):
        check = source.name(_compiled(shape.type_).check)
        if nullable:  # KIP-893: an int8 marker, negative for null
            source.add(indent, "if pos >= end:", "    raise truncated('a struct marker', pos)",
                       "pos += 1", "if buf[pos - 1] < 128:", f"    pos = {check}(buf, pos, end, edits)")
        else:
            source.add(indent, f"pos = {check}(buf, pos, end, edits)")
    else:
        kafka_type = get_schema_field_type(field)
        if kafka_type in _FIXED:
            _emit_fixed(source, indent, _FIXED[kafka_type])
        else:
            _emit_sized(source, indent, kafka_type, flexible, nullable)


def _emit_fixed(source: _Source, indent: int, size: int) -> None:
    source.add(indent, f"pos += {size}", "if pos > end:", f"    raise truncated('a {size}-byte field', pos - {size})")


def _emit_length(source: _Source, indent: int, flexible: bool, width: int) -> None:
    """``n`` = the length or count at ``pos``; ``start`` = where it was."""
    source.add(indent, "start = pos")
    if flexible:
        source.add(indent, "if pos >= end:", "    raise truncated('a length', pos)",
                   "n = buf[pos]", "if n < 128:", "    pos += 1",
                   "elif pos + 1 < end and buf[pos + 1] < 128:  # two bytes: records up to 16 KiB",
                   "    n = (n & 127) | (buf[pos + 1] << 7)", "    pos += 2", "else:",
                   "    n, pos = read_uvarint(buf, pos)", "n -= 1  # compact: length + 1, 0 for null")
    else:
        source.add(indent, f"if pos + {width} > end:", "    raise truncated('a length', pos)",
                   f"(n,) = unpack{8 * width}(buf, pos)", f"pos += {width}")


def _emit_null_check(source: _Source, indent: int, nullable: bool, what: str) -> None:
    """After ``_emit_length``: -1 is null, allowed only where the schema says."""
    allowed = "n != -1" if nullable else "True"
    source.add(indent, "if n < 0:", f"    if {allowed}:",
               f"        raise Malformed(f'{what} {{n}} at byte {{start}} is not allowed here')")


def _emit_sized(source: _Source, indent: int, kafka_type: str, flexible: bool, nullable: bool) -> None:
    """A string, bytes or records field: its length must fit."""
    _emit_length(source, indent, flexible, 2 if kafka_type == "string" else 4)
    _emit_null_check(source, indent, nullable, "length")
    source.add(indent, "else:", "    pos += n", "    if pos > end:",
               "        raise truncated(f'a string of {n} bytes', start)")


def _emit_count(source: _Source, indent: int, flexible: bool, nullable: bool, element_size: int) -> None:
    """An array's count: null only where allowed, and no more entries than the
    bytes left could hold.  Leaves an ``else:`` open for the entries."""
    _emit_length(source, indent, flexible, 4)
    _emit_null_check(source, indent, nullable, "array length")
    source.add(indent, f"elif n * {element_size} > end - pos:",
               "    raise Malformed(f'array of {n} entries at byte {start} is longer than the {end - pos} bytes left')",
               "else:")


def _truncated(what: str, pos: int) -> MalformedRequest:
    return MalformedRequest(f"request truncated in {what} at byte {pos}")


def _tagged_section(buf, pos: int, end: int, edits: list, known: dict[int, Check]) -> int:
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

