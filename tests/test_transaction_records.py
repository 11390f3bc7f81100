"""The ``__transaction_state`` record layouts, byte for byte (Kafka's
TransactionLogKey v0 and TransactionLogValue v0 written; v0 and the flexible
v1 read), the states' ids and names, and what a corrupt record raises."""

import struct

import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.varint import encode_uvarint
from hpbroker.workers.transactions import records as R
from hpbroker.workers.transactions.state import TxnMetadata, TxnState


def s16(text: str) -> bytes:
    return struct.pack(">h", len(text.encode())) + text.encode()


def compact(text: str) -> bytes:
    """A compact string: varint length + 1, then the bytes."""
    raw = text.encode()
    return encode_uvarint(len(raw) + 1) + raw


def tag(number: int, payload: bytes) -> bytes:
    return encode_uvarint(number) + encode_uvarint(len(payload)) + payload


# --- the key ------------------------------------------------------------------------------------
def test_key_v0_layout():
    key = R.encode_key("my-txn")
    assert key == b"\x00\x00" + s16("my-txn")
    assert R.decode_key(key) == "my-txn"
    assert R.decode_key(R.encode_key("")) == ""


@pytest.mark.parametrize("data", [
    b"",
    b"\x00",
    b"\x00\x00",  # no length
    b"\x00\x00\x00",
    b"\x00\x00\x00\x05abc",  # the id is cut off
    b"\x00\x00\xff\xfe",  # a negative length
    b"\x00\x01" + s16("x"),  # a version Kafka has not defined
    b"\x00\x00" + struct.pack(">h", 2) + b"\xff\xfe",  # not UTF-8
])
def test_a_corrupt_key_is_a_transaction_log_error(data):
    with pytest.raises(R.TransactionLogError):
        R.decode_key(data)


@given(st.text(max_size=200))
def test_keys_round_trip(transactional_id):
    assert R.decode_key(R.encode_key(transactional_id)) == transactional_id


# --- the value, v0 ------------------------------------------------------------------------------
def test_value_v0_layout_topics_and_partitions_sorted():
    value = R.TxnLogValue(producer_id=4000, producer_epoch=3, timeout_ms=60_000, status=int(TxnState.ONGOING),
                          partitions=(("b", 2), ("a", 1), ("b", 0)), last_update_ms=1_700_000_000_123,
                          start_ms=1_700_000_000_100)
    data = R.encode_value(value)
    assert data == (b"\x00\x00" + struct.pack(">qhib", 4000, 3, 60_000, 1)
                    + struct.pack(">i", 2)
                    + s16("a") + struct.pack(">ii", 1, 1)
                    + s16("b") + struct.pack(">iii", 2, 0, 2)
                    + struct.pack(">qq", 1_700_000_000_123, 1_700_000_000_100))
    decoded = R.decode_value(data)
    assert decoded.partitions == (("a", 1), ("b", 0), ("b", 2))
    assert decoded == R.TxnLogValue(4000, 3, 60_000, 1, (("a", 1), ("b", 0), ("b", 2)), 1_700_000_000_123,
                                    1_700_000_000_100)


def test_an_empty_transaction_has_null_partitions():
    """Kafka writes a null array (count -1) for a transaction with no partitions
    (Empty, Complete*), and reads a null array as none."""
    value = R.TxnLogValue(7, 0, 60_000, int(TxnState.EMPTY), (), 1000, -1)
    data = R.encode_value(value)
    assert data == b"\x00\x00" + struct.pack(">qhib", 7, 0, 60_000, 0) + b"\xff\xff\xff\xff" + struct.pack(
        ">qq", 1000, -1)
    assert R.decode_value(data) == value
    # an empty (not null) array, as another writer may put it, reads the same
    empty = b"\x00\x00" + struct.pack(">qhib", 7, 0, 60_000, 0) + b"\x00\x00\x00\x00" + struct.pack(">qq", 1000, -1)
    assert R.decode_value(empty) == value


values = st.builds(
    R.TxnLogValue,
    producer_id=st.integers(-1, 2**63 - 1),
    producer_epoch=st.integers(-1, 2**15 - 1),
    timeout_ms=st.integers(0, 2**31 - 1),
    status=st.sampled_from([int(s) for s in TxnState]),
    partitions=st.lists(st.tuples(st.text(min_size=1, max_size=30), st.integers(0, 2**31 - 1)), max_size=12,
                        unique=True).map(lambda ps: tuple(sorted(ps))),
    last_update_ms=st.integers(-1, 2**62),
    start_ms=st.integers(-1, 2**62),
)


@given(values)
def test_values_round_trip(value):
    assert R.decode_value(R.encode_value(value)) == value


# --- the value, v1 (flexible) ------------------------------------------------------------------------
def value_v1(partitions, *, tags: bytes = b"", entry_tags: bytes = b"\x00", producer_id: int = 4000,
             epoch: int = 5, timeout_ms: int = 30_000, status: int = 2, last_update: int = 1_700_000_000_999,
             start: int = 1_700_000_000_500) -> bytes:
    """A TransactionLogValue v1 as Kafka's generated code writes it (TransactionLogValue.json):
    compact arrays and strings, a tag section per partitions entry and one at the end."""
    out = b"\x00\x01" + struct.pack(">qhib", producer_id, epoch, timeout_ms, status)
    if partitions is None:
        out += b"\x00"  # a null compact array
    else:
        out += encode_uvarint(len(partitions) + 1)
        for topic, ids in partitions:
            out += compact(topic) + encode_uvarint(len(ids) + 1) + b"".join(struct.pack(">i", p) for p in ids)
            out += entry_tags
    out += struct.pack(">qq", last_update, start)
    return out + (tags or b"\x00")


def test_a_flexible_value_with_kafkas_tagged_fields_decodes():
    # PreviousProducerId (tag 0), NextProducerId (tag 1), ClientTransactionVersion (tag 2)
    tags = b"\x03" + tag(0, struct.pack(">q", 3999)) + tag(1, struct.pack(">q", 4001)) + tag(2, struct.pack(">h", 2))
    data = value_v1([("orders", [0, 3]), ("payments", [1])], tags=tags)
    assert R.decode_value(data) == R.TxnLogValue(4000, 5, 30_000, int(TxnState.PREPARE_COMMIT),
                                                 (("orders", 0), ("orders", 3), ("payments", 1)),
                                                 1_700_000_000_999, 1_700_000_000_500)


def test_a_flexible_value_skips_unknown_tags_inside_a_partitions_entry():
    entry_tags = b"\x01" + tag(9, b"\x01\x02\x03")
    data = value_v1([("t", [1]), ("u", [2])], entry_tags=entry_tags)
    assert R.decode_value(data).partitions == (("t", 1), ("u", 2))


def test_a_flexible_value_with_multi_byte_lengths():
    topic = "x" * 200  # compact length 201: two varint bytes
    ids = list(range(130))  # compact count 131: two varint bytes
    data = value_v1([(topic, ids)])
    assert R.decode_value(data).partitions == tuple((topic, p) for p in ids)


def test_a_flexible_value_with_null_partitions():
    value = R.decode_value(value_v1(None, status=int(TxnState.COMPLETE_COMMIT)))
    assert (value.partitions, value.status) == ((), int(TxnState.COMPLETE_COMMIT))


# --- corrupt values ---------------------------------------------------------------------------------
def test_every_truncation_of_a_v0_value_is_a_transaction_log_error():
    data = R.encode_value(R.TxnLogValue(1, 2, 3, 1, (("topic", 0), ("topic", 1)), 4, 5))
    for end in range(len(data)):
        with pytest.raises(R.TransactionLogError):
            R.decode_value(data[:end])


def test_every_truncation_of_a_v1_value_before_its_last_field_is_a_transaction_log_error():
    data = value_v1([("orders", [0, 3]), ("payments", [1])])
    fields_end = len(data) - 1  # the top-level tag section is all that follows the start time
    for end in range(fields_end):
        with pytest.raises(R.TransactionLogError):
            R.decode_value(data[:end])


@pytest.mark.parametrize("data", [
    b"\x00\x02" + bytes(40),  # a version Kafka has not defined
    b"\xff\xff" + bytes(40),
    # a topic name with a negative length
    b"\x00\x00" + struct.pack(">qhib", 1, 0, 1, 1) + struct.pack(">i", 1) + b"\xff\xfe" + bytes(30),
    # a topic name that is not UTF-8
    b"\x00\x00" + struct.pack(">qhib", 1, 0, 1, 1) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"\xff"
    + struct.pack(">i", 0) + bytes(16),
    # a count of partitions far beyond the bytes there are
    b"\x00\x00" + struct.pack(">qhib", 1, 0, 1, 1) + struct.pack(">i", 1) + s16("t") + struct.pack(">i", 2**31 - 1),
    # flexible: a compact length whose varint never ends
    b"\x00\x01" + struct.pack(">qhib", 1, 0, 1, 1) + b"\x02" + b"\xff" * 6,
    # flexible: a null (0) compact string as a topic name
    b"\x00\x01" + struct.pack(">qhib", 1, 0, 1, 1) + b"\x02\x00" + bytes(20),
])
def test_a_corrupt_value_is_a_transaction_log_error(data):
    with pytest.raises(R.TransactionLogError):
        R.decode_value(data)


@settings(max_examples=300)
@given(st.binary(max_size=80), st.sampled_from([b"\x00\x00", b"\x00\x01", b""]))
def test_arbitrary_bytes_decode_or_raise_a_transaction_log_error(tail, version):
    data = version + tail
    try:
        R.decode_value(data)
    except R.TransactionLogError:
        pass
    try:
        R.decode_key(data)
    except R.TransactionLogError:
        pass


# --- the states ----------------------------------------------------------------------------------------
def test_states_carry_kafkas_ids_and_names():
    assert [(int(s), s.display) for s in TxnState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"), (4, "CompleteCommit"),
        (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence")]
    assert TxnState.by_display("Ongoing") is TxnState.ONGOING
    assert TxnState.by_display("CompleteCommit") is TxnState.COMPLETE_COMMIT
    assert TxnState.by_display("Running") is None


def test_metadata_round_trips_through_its_value():
    md = TxnMetadata("tx", 4000, 3, 60_000, TxnState.ONGOING, frozenset({("b", 1), ("a", 0)}), start_ms=100,
                     last_update_ms=200)
    value = R.decode_value(R.encode_value(md.value()))
    assert value.partitions == (("a", 0), ("b", 1))
    assert TxnMetadata.from_value("tx", value) == md
    # a status no state has (a newer Kafka's) is read as Dead, not refused
    assert TxnMetadata.from_value("tx", R.TxnLogValue(1, 0, 1, 42, (), 0, -1)).state is TxnState.DEAD


def test_an_ongoing_transaction_expires_after_its_timeout_only():
    md = TxnMetadata("tx", 1, 0, 1000, TxnState.ONGOING, frozenset({("t", 0)}), start_ms=10_000)
    assert not md.expired(11_000) and md.expired(11_001)
    assert not md.moved(state=TxnState.PREPARE_COMMIT).expired(1_000_000)
