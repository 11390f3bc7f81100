"""The records of ``__consumer_offsets``, in Kafka's own layouts, so Kafka's
tools (``kafka-console-consumer --formatter ...GroupMetadataMessageFormatter``,
``kafka-dump-log --offsets-decoder``) read what hpbroker writes and hpbroker
reloads what Kafka wrote.

Every key and value starts with an int16 schema version; the rest is Kafka's
classic (non-flexible) message encoding: int16-length UTF-8 strings (-1 =
null), int32-length byte strings, int32-count arrays, all big-endian.

Keys (the version says which record it is)::

    OffsetCommitKey   v0/v1: version int16 | group string | topic string | partition int32
    GroupMetadataKey  v2:    version int16 | group string
    (v3+ are the KIP-848 consumer-group records; a classic coordinator skips them)

Values (a null value is a tombstone: the offset, or the whole group, is gone)::

    OffsetCommitValue v0: offset int64 | metadata string | commitTimestamp int64
                      v1: offset int64 | metadata string | commitTimestamp int64 | expireTimestamp int64
                      v2: offset int64 | metadata string | commitTimestamp int64
                      v3: offset int64 | leaderEpoch int32 | metadata string | commitTimestamp int64
                      v4: v3 flexible (compact string, tagged fields)
    GroupMetadataValue v0: protocolType string | generation int32 | protocol string? | leader string?
                           | members [memberId string | clientId string | clientHost string
                                      | sessionTimeout int32 | subscription bytes | assignment bytes]
                       v1: member gains rebalanceTimeout int32 before sessionTimeout
                       v2: currentStateTimestamp int64 after leader
                       v3: member gains groupInstanceId string? after memberId
                       v4: v3 flexible

We write OffsetCommitKey v1 + OffsetCommitValue v3 (what Kafka 2.1+ writes
unless an expire timestamp is set) and GroupMetadataKey v2 +
GroupMetadataValue v3 (Kafka 2.3+).  Sure: the field orders above match
Kafka's OffsetCommitKey/Value.json and GroupMetadataKey/Value.json (and the
pre-KIP-848 Scala ``GroupMetadataManager`` schemas), and that the key and
value each carry their own version prefix.  Less sure: v4 of the values is
decoded from the flexible rules (compact lengths + tagged fields) without a
capture from a real Kafka to check it against.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from hpbroker.varint import decode_uvarint

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")


@dataclass(frozen=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    group: str


@dataclass(frozen=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1
    expire_timestamp: int = -1  # only v1 carries it


@dataclass(frozen=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


class _Writer:
    def __init__(self, version: int):
        self.parts = [_I16.pack(version)]

    def i32(self, v):
        self.parts.append(_I32.pack(v))
        return self

    def i64(self, v):
        self.parts.append(_I64.pack(v))
        return self

    def string(self, v: str | None):
        if v is None:
            self.parts.append(_I16.pack(-1))
        else:
            data = v.encode()
            self.parts.append(_I16.pack(len(data)) + data)
        return self

    def bytes_(self, v: bytes):
        self.parts.append(_I32.pack(len(v)) + bytes(v))
        return self

    def done(self) -> bytes:
        return b"".join(self.parts)


class _Reader:
    def __init__(self, data: bytes, flexible: bool = False):
        self.data, self.pos, self.flexible = memoryview(data), 0, flexible

    def _take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.data, self.pos)
        self.pos += s.size
        return v

    def i16(self): return self._take(_I16)
    def i32(self): return self._take(_I32)
    def i64(self): return self._take(_I64)

    def uvarint(self) -> int:
        value, self.pos = decode_uvarint(self.data, self.pos)
        return value

    def _length(self, fixed: struct.Struct) -> int:
        return self.uvarint() - 1 if self.flexible else self._take(fixed)

    def string(self) -> str | None:
        n = self._length(_I16)
        if n < 0:
            return None
        v = bytes(self.data[self.pos:self.pos + n]).decode()
        self.pos += n
        return v

    def bytes_(self) -> bytes:
        n = self._length(_I32)
        v = bytes(self.data[self.pos:self.pos + max(n, 0)])
        self.pos += max(n, 0)
        return v

    def array_len(self) -> int:
        return self._length(_I32)

    def tags(self) -> None:
        if self.flexible:
            for _ in range(self.uvarint()):
                self.uvarint()  # the tag: these records define none we read
                size = self.uvarint()  # read before the += below loads self.pos
                self.pos += size


# --- keys -----------------------------------------------------------------------
def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _Writer(OFFSET_KEY_VERSION).string(group).string(topic).i32(partition).done()


def encode_group_key(group: str) -> bytes:
    return _Writer(GROUP_KEY_VERSION).string(group).done()


def decode_key(data: bytes) -> OffsetKey | GroupKey | None:
    """The key, or None for record types a classic coordinator does not use."""
    r = _Reader(data)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())  # pyright: ignore[reportArgumentType]  (non-nullable in Kafka's schema)
    if version == 2:
        return GroupKey(r.string())  # pyright: ignore[reportArgumentType]  (non-nullable in Kafka's schema)
    return None


# --- values ---------------------------------------------------------------------
def encode_offset_value(v: OffsetValue) -> bytes:
    return (_Writer(OFFSET_VALUE_VERSION).i64(v.offset).i32(v.leader_epoch).string(v.metadata)
            .i64(v.commit_timestamp).done())


def decode_offset_value(data: bytes) -> OffsetValue:
    r = _Reader(data)
    version = r.i16()
    r.flexible = version >= 4
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.string() or ""
    commit = r.i64()
    expire = r.i64() if version == 1 else -1
    return OffsetValue(offset, epoch, metadata, commit, expire)


def encode_group_value(v: GroupValue) -> bytes:
    w = (_Writer(GROUP_VALUE_VERSION).string(v.protocol_type).i32(v.generation).string(v.protocol)
         .string(v.leader).i64(v.current_state_timestamp).i32(len(v.members)))
    for m in v.members:
        (w.string(m.member_id).string(m.group_instance_id).string(m.client_id).string(m.client_host)
         .i32(m.rebalance_timeout).i32(m.session_timeout).bytes_(m.subscription).bytes_(m.assignment))
    return w.done()


def decode_group_value(data: bytes) -> GroupValue:
    r = _Reader(data)
    version = r.i16()
    r.flexible = version >= 4
    protocol_type = r.string() or ""
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.array_len(), 0)):
        member_id = r.string()
        instance = r.string() if version >= 3 else None
        client_id, client_host = r.string(), r.string()
        session = r.i32()
        rebalance = session
        if version >= 1:  # rebalanceTimeout comes first; what we read was it
            rebalance, session = session, r.i32()
        subscription, assignment = r.bytes_(), r.bytes_()
        r.tags()
        # member_id, client_id and client_host are non-nullable in Kafka's schema
        members.append(MemberValue(member_id, instance, client_id, client_host, rebalance, session,  # pyright: ignore[reportArgumentType]
                                   subscription, assignment))
    r.tags()
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
