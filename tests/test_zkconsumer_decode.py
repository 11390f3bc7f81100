"""How the ZooKeeper consumer turns a fetched chunk into messages: plain,
compressed and legacy entries in offset order, markers skipped but counted,
records before the position dropped, a cut-off tail left for the next fetch,
and corrupt data refused only once the good entries before it are handed out."""

import pytest

from hpbroker.kernels import layout
from hpbroker.records import Header, Record, encode_batch
from hpbroker.records.control import encode_control_batch
from hpbroker.records.legacy import encode_message_set
from hpbroker.zkconsumer import CorruptFetchError
from hpbroker.zkconsumer.partition_fetcher import decode_fetched

TP = ("t", 0)


def records(first: int, n: int, headers=()) -> list[Record]:
    return [Record(o, 1_700_000_000_000 + o, b"k%d" % o if o % 2 else None, b"v%d" % o, headers) for o in
            range(first, first + n)]


def chunk() -> bytes:
    return b"".join([
        encode_batch(records(0, 3, (Header(b"trace", b"1"), Header(b"empty", None))), base_offset=0),
        encode_batch(records(3, 4), base_offset=3, compression=layout.CODEC_ZSTD),
        encode_control_batch(0, producer_id=7, producer_epoch=0, coordinator_epoch=0, base_offset=7),
        encode_message_set(records(8, 2), magic=1),
        encode_batch(records(10, 2), base_offset=10, compression=layout.CODEC_GZIP),
    ])


def test_every_kind_of_entry_in_offset_order():
    messages, position = decode_fetched(TP, chunk(), 0)
    assert [m.offset for m in messages] == [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11]
    assert position == 12
    first = messages[0]
    assert (first.topic, first.partition, first.key, first.value, first.timestamp) == (
        "t", 0, None, b"v0", 1_700_000_000_000)
    assert first.headers == (("trace", b"1"), ("empty", None))
    assert messages[3].key == b"k3" and messages[3].value == b"v3" and messages[3].headers == ()
    assert messages[8].value == b"v9" and messages[8].key == b"k9"


def test_records_before_the_position_are_dropped():
    messages, position = decode_fetched(TP, chunk(), 5)
    assert [m.offset for m in messages] == [5, 6, 8, 9, 10, 11] and position == 12


def test_a_cut_off_tail_waits_for_the_next_fetch():
    data = chunk()
    last = encode_batch(records(12, 5), base_offset=12)
    messages, position = decode_fetched(TP, data + last[:len(last) // 2], 0)
    assert messages[-1].offset == 11 and position == 12
    assert decode_fetched(TP, last[:20], 12) == ([], 12)


def test_corrupt_data_is_refused_after_the_good_entries_before_it():
    good = encode_batch(records(0, 2), base_offset=0)
    bad = bytearray(encode_batch(records(2, 2), base_offset=2))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    messages, position = decode_fetched(TP, good + bytes(bad), 0)
    assert [m.offset for m in messages] == [0, 1] and position == 2
    with pytest.raises(CorruptFetchError, match="t-0: corrupt record data near offset 2"):
        decode_fetched(TP, bytes(bad), 2)
