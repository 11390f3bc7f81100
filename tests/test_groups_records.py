"""The ``__consumer_offsets`` record layouts, byte for byte (Kafka's
OffsetCommitKey/Value and GroupMetadataKey/Value), and the group-to-partition rule."""

import struct

import pytest

from hpbroker.server.ownership import OFFSETS_TOPIC, group_owner, group_partition, java_string_hash, partition_owner
from hpbroker.workers.groups import records as R


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text.encode())) + text.encode()


def test_offset_commit_key_v1_layout():
    key = R.encode_offset_key("grp", "events", 7)
    assert key == b"\x00\x01" + s16("grp") + s16("events") + b"\x00\x00\x00\x07"
    assert R.decode_key(key) == R.OffsetKey("grp", "events", 7)
    assert R.decode_key(b"\x00\x00" + key[2:]) == R.OffsetKey("grp", "events", 7)  # v0: same fields


def test_group_metadata_key_v2_layout():
    key = R.encode_group_key("grp")
    assert key == b"\x00\x02" + s16("grp")
    assert R.decode_key(key) == R.GroupKey("grp")
    assert R.decode_key(b"\x00\x03" + s16("grp")) is None  # KIP-848 records: not ours


def test_offset_commit_value_v3_layout():
    value = R.encode_offset_value(R.OffsetValue(offset=42, leader_epoch=5, metadata="m", commit_timestamp=1700))
    assert value == (b"\x00\x03" + struct.pack(">q", 42) + struct.pack(">i", 5) + s16("m") + struct.pack(">q", 1700))
    assert R.decode_offset_value(value) == R.OffsetValue(42, 5, "m", 1700, -1)


def test_older_offset_commit_values_decode():
    v0 = b"\x00\x00" + struct.pack(">q", 9) + s16("x") + struct.pack(">q", 100)
    v1 = b"\x00\x01" + struct.pack(">q", 9) + s16("x") + struct.pack(">qq", 100, 200)
    v2 = b"\x00\x02" + struct.pack(">q", 9) + s16("") + struct.pack(">q", 100)
    assert R.decode_offset_value(v0) == R.OffsetValue(9, -1, "x", 100, -1)
    assert R.decode_offset_value(v1) == R.OffsetValue(9, -1, "x", 100, 200)
    assert R.decode_offset_value(v2) == R.OffsetValue(9, -1, "", 100, -1)
    # v4 is v3 flexible: compact string (length + 1) and an empty tag section
    v4 = b"\x00\x04" + struct.pack(">qi", 9, 2) + b"\x02x" + struct.pack(">q", 100) + b"\x00"
    assert R.decode_offset_value(v4) == R.OffsetValue(9, 2, "x", 100, -1)


def test_flexible_values_read_multi_byte_lengths_and_skip_tags():
    def c(text: str) -> bytes:  # compact string: varint length + 1
        return bytes([len(text) + 1]) + text.encode()

    subscription = b"s" * 200  # compact length 201: two varint bytes
    tags = b"\x01" + b"\x07\x03abc"  # one unknown tag (7) of 3 bytes
    member = (c("m") + c("i") + c("c") + c("h") + struct.pack(">ii", 9000, 7000) + b"\xc9\x01" + subscription
              + b"\x02A" + tags)
    v4 = (b"\x00\x04" + c("consumer") + struct.pack(">i", 3) + c("range") + c("m") + struct.pack(">q", 5)
          + b"\x02" + member + tags)
    assert R.decode_group_value(v4) == R.GroupValue("consumer", 3, "range", "m", 5, (
        R.MemberValue("m", "i", "c", "h", 9000, 7000, subscription, b"A"),))


def test_a_torn_flexible_value_is_a_value_error():
    v4 = b"\x00\x04" + struct.pack(">qi", 9, 2) + b"\xc9"  # the length's second byte is missing
    with pytest.raises(ValueError, match="cut off after 1 byte"):
        R.decode_offset_value(v4)


def test_group_metadata_value_v3_layout():
    member = R.MemberValue("m-1", "inst", "client", "/127.0.0.1", 30000, 6000, b"\x01\x02", b"\x03")
    value = R.GroupValue("consumer", 4, "range", "m-1", 1234, (member,))
    data = R.encode_group_value(value)
    expected = (b"\x00\x03" + s16("consumer") + struct.pack(">i", 4) + s16("range") + s16("m-1")
                + struct.pack(">q", 1234) + struct.pack(">i", 1)
                + s16("m-1") + s16("inst") + s16("client") + s16("/127.0.0.1") + struct.pack(">ii", 30000, 6000)
                + struct.pack(">i", 2) + b"\x01\x02" + struct.pack(">i", 1) + b"\x03")
    assert data == expected
    assert R.decode_group_value(data) == value


def test_empty_group_value_has_null_protocol_and_leader():
    data = R.encode_group_value(R.GroupValue("consumer", 2, None, None, 5, ()))
    assert data == b"\x00\x03" + s16("consumer") + struct.pack(">i", 2) + b"\xff\xff\xff\xff" + struct.pack(">qi", 5, 0)
    assert R.decode_group_value(data).protocol is None


def test_group_metadata_value_v0_and_v1_decode():
    member_v0 = s16("m") + s16("c") + s16("h") + struct.pack(">i", 7000) + struct.pack(">i", 0) + struct.pack(">i", 0)
    v0 = (b"\x00\x00" + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(">i", 1)
          + member_v0)
    decoded = R.decode_group_value(v0)
    assert decoded.members[0] == R.MemberValue("m", None, "c", "h", 7000, 7000, b"", b"")
    member_v1 = s16("m") + s16("c") + s16("h") + struct.pack(">ii", 9000, 7000) + struct.pack(">ii", 0, 0)
    v1 = (b"\x00\x01" + s16("consumer") + struct.pack(">i", 1) + s16("range") + s16("m") + struct.pack(">i", 1)
          + member_v1)
    assert R.decode_group_value(v1).members[0].rebalance_timeout == 9000
    assert R.decode_group_value(v1).members[0].session_timeout == 7000


def test_java_string_hash_and_kafka_partition_for():
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE: Utils.abs makes it 0
    assert group_partition("polygenelubricants") == 0
    assert group_partition("hello") == 99162322 % 50
    assert java_string_hash("\u00e9t\u00e9") == (0xE9 * 31 * 31 + ord("t") * 31 + 0xE9)  # UTF-16 units, not bytes
    assert java_string_hash("\U0001F600") == 0xD83D * 31 + 0xDE00  # a surrogate pair is two units
    for group in ("g1", "consumers", "x" * 300):
        p = group_partition(group, 50)
        assert 0 <= p < 50
        assert group_owner(group, 4) == partition_owner(OFFSETS_TOPIC, p, 4)
