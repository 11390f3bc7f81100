"""FrameReader: frames split across reads, several per read, sizes out of
range; frames larger than the scratch received into buffers of their own;
every frame writable and independent of the others. LargeFrameBuffers: a
large frame's buffer serves a later frame only once no view of it is left."""

import gc
import struct

import numpy
import pytest
from hypothesis import given, settings, strategies as st

from hpbroker.protocol import FrameReader, FrameTooLarge, frame
from hpbroker.protocol.framing import LargeFrameBuffers
from hpbroker.shared.payload_arena import PayloadArena

SCRATCH = 4096  # a small scratch, so that modest frames take the large-frame path too


def payloads(frames):
    return [bytes(f) for f in frames]


def test_several_frames_in_one_feed():
    stream = frame(b"one") + frame(b"") + frame(b"three")
    assert payloads(FrameReader().feed(stream)) == [b"one", b"", b"three"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64])
def test_any_split_of_the_stream_gives_the_same_frames(chunk):
    bodies = [b"a" * 10, b"b" * 300, b"", b"c"]
    stream = b"".join(frame(b) for b in bodies)
    reader = FrameReader()
    got = []
    for i in range(0, len(stream), chunk):
        got += payloads(reader.feed(stream[i:i + chunk]))
    assert got == bodies
    assert reader.buffered == 0


def test_partial_frame_is_buffered_not_an_error():
    reader = FrameReader()
    data = frame(b"hello world")
    assert reader.feed(data[:2]) == []       # inside the size prefix
    assert reader.feed(data[2:7]) == []      # inside the body
    assert reader.buffered == 7
    assert payloads(reader.feed(data[7:] + frame(b"x")[:3])) == [b"hello world"]
    assert reader.buffered == 3


def test_frames_survive_reuse_of_the_callers_buffer():
    buf = bytearray(frame(b"keep me"))
    [got] = FrameReader().feed(buf)
    buf[:] = b"\x00" * len(buf)
    assert bytes(got) == b"keep me"


def test_memoryview_input():
    assert payloads(FrameReader().feed(memoryview(frame(b"mv")))) == [b"mv"]


def test_size_at_the_limit_is_accepted_above_is_refused():
    reader = FrameReader(max_frame_bytes=8)
    assert payloads(reader.feed(frame(b"12345678"))) == [b"12345678"]
    with pytest.raises(FrameTooLarge) as info:
        reader.feed(frame(b"123456789"))
    assert info.value.size == 9 and info.value.limit == 8
    assert "socket.request.max.bytes" in str(info.value)


def test_oversize_is_detected_from_the_prefix_alone():
    # A client announcing 2 GiB must be refused before anything is buffered.
    with pytest.raises(FrameTooLarge):
        FrameReader().feed(struct.pack(">i", 104857601))


def test_default_limit_is_kafkas():
    assert FrameReader().max_frame_bytes == 104857600


def test_negative_size_is_refused_and_the_reader_stays_failed():
    reader = FrameReader()
    with pytest.raises(FrameTooLarge):
        reader.feed(struct.pack(">i", -1) + b"junk")
    with pytest.raises(FrameTooLarge):
        reader.feed(frame(b"fine"))


def test_frames_whole_before_a_bad_size_in_the_same_read_are_handed_back_then_the_failure():
    """The stream ends at the bad size, not before it: the requests (or a
    peer's answers) that came whole ahead of it are the caller's to handle;
    ``failed`` then says the stream is done, and the next read raises."""
    reader = FrameReader(max_frame_bytes=100)
    buffer = reader.get_buffer()
    data = frame(b"one") + frame(b"two") + struct.pack(">i", 101) + b"junk"
    buffer[:len(data)] = data
    assert payloads(reader.buffer_updated(len(data))) == [b"one", b"two"]
    assert reader.failed is not None and reader.failed.size == 101
    with pytest.raises(FrameTooLarge):
        reader.buffer_updated(0)
    assert payloads(FrameReader(max_frame_bytes=100).feed(data)) == [b"one", b"two"]


def test_oversize_detected_when_prefix_arrives_in_pieces():
    reader = FrameReader(max_frame_bytes=100)
    prefix = struct.pack(">i", 101)
    assert reader.feed(prefix[:3]) == []
    with pytest.raises(FrameTooLarge):
        reader.feed(prefix[3:])


def receive_once(reader: FrameReader, data: bytes, pos: int, read_size: int) -> tuple[int, list]:
    """One receive of ``data[pos:]`` into ``get_buffer``, at most ``read_size``: where
    the data now is read to, and the frames it completed."""
    buffer = reader.get_buffer()
    assert len(buffer) > 0
    n = min(len(buffer), read_size, len(data) - pos)
    buffer[:n] = data[pos:pos + n]
    return pos + n, reader.buffer_updated(n)


def receive(reader: FrameReader, data: bytes, read_size: int) -> list:
    """As a BufferedProtocol's transport: receive into ``get_buffer`` at most ``read_size`` at a time."""
    frames, pos = [], 0
    while pos < len(data):
        pos, got = receive_once(reader, data, pos, read_size)
        frames += got
    return frames


@given(sizes=st.lists(st.integers(0, 3 * SCRATCH), max_size=12), read_size=st.integers(1, 70000))
@settings(max_examples=60, deadline=None)
def test_any_mix_of_small_and_large_frames_read_any_way_comes_out_whole(sizes, read_size):
    bodies = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    reader = FrameReader(scratch_bytes=SCRATCH)
    got = receive(reader, b"".join(frame(b) for b in bodies), read_size)
    assert [bytes(f) for f in got] == bodies
    assert reader.buffered == 0


@given(sizes=st.lists(st.integers(0, 3 * SCRATCH), min_size=1, max_size=8), read_size=st.integers(1, 70000),
       stop_after=st.integers(0, 20000), asked_again=st.booleans())
@settings(max_examples=80, deadline=None)
def test_a_reader_told_to_stop_at_a_frame_end_receives_nothing_past_it(sizes, read_size, stop_after, asked_again):
    """Told to stop part way (a connection about to move), a reader takes no
    byte beyond the end of the frame in hand: the frames so far come out
    whole, it rests at the first boundary, and what it did not take is the
    frames after, whole for a reader elsewhere. Asked again at a boundary, it
    takes that one next frame and no more."""
    bodies = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    data = b"".join(frame(b) for b in bodies)
    ends = [sum(len(frame(b)) for b in bodies[:i + 1]) for i in range(len(bodies))]
    reader = FrameReader(scratch_bytes=SCRATCH)
    frames = receive(reader, data[:min(stop_after, len(data))], read_size)
    pos = sum(len(frame(bytes(f))) for f in frames) + reader.buffered  # what it took: maybe past stop_after
    reader.stop_at_frame_end()
    boundary = pos in ends or pos == 0
    if boundary and asked_again and pos < len(data):
        expected = min(e for e in ends if e > pos)
    else:
        expected = pos if boundary else min(e for e in ends if e > pos)

    if boundary and asked_again and pos < len(data):
        pos, got = receive_once(reader, data, pos, read_size)
        frames += got
    while reader.buffered:
        pos, got = receive_once(reader, data, pos, read_size)
        frames += got
    assert pos == expected, "it stops at the end of the frame in hand"
    assert [bytes(f) for f in frames] == bodies[:ends.index(pos) + 1 if pos else 0]
    elsewhere = FrameReader(scratch_bytes=SCRATCH)
    assert [bytes(f) for f in receive(elsewhere, data[pos:], read_size)] == bodies[len(frames):]
    reader.stop_at_frame_end(False)
    assert len(reader.get_buffer()) == SCRATCH  # receiving freely again


def test_a_large_frame_is_received_into_a_buffer_of_its_size_and_counted_as_buffered():
    reader = FrameReader(scratch_bytes=SCRATCH)
    body = bytes(range(256)) * 40  # 10240 bytes: larger than the scratch
    data = frame(b"small") + frame(body)
    assert [bytes(f) for f in receive(reader, data[:SCRATCH], SCRATCH)] == [b"small"]
    assert len(reader.get_buffer()) == len(data) - SCRATCH  # exactly what is missing of it
    assert reader.buffered == SCRATCH - len(frame(b"small"))
    [got] = receive(reader, data[SCRATCH:], SCRATCH)
    assert bytes(got) == body and len(got) == len(body) and got.obj is not reader._scratch


def test_frames_are_writable_and_independent():
    reader = FrameReader(scratch_bytes=SCRATCH)
    first, second, big = reader.feed(frame(b"aaaa") + frame(b"bbbb") + frame(b"c" * (2 * SCRATCH)))
    assert not first.readonly and not big.readonly
    first[:] = b"zzzz"  # a handler stamping its frame in place
    big[:1] = b"y"
    assert bytes(second) == b"bbbb" and bytes(reader.feed(frame(b"next"))[0]) == b"next"
    assert bytes(first) == b"zzzz" and bytes(big[:2]) == b"yc"


def test_a_large_frames_buffer_is_reused_only_once_no_view_of_it_is_left():
    buffers = LargeFrameBuffers(keep_bytes=2**20)
    first = buffers.take(100_000)
    first[:3] = b"abc"
    kept = id(first.obj)  # its id: holding the array itself would keep it in use
    second = buffers.take(100_000)
    assert id(second.obj) != kept  # the first is still in use
    part = numpy.frombuffer(first, numpy.uint8)[1:3]  # a handler's view of a slice, as records are kept
    del first
    assert id(buffers.take(90_000).obj) != kept  # the view still holds it
    assert bytes(part) == b"bc"
    del part
    gc.collect()
    again = buffers.take(90_000)
    assert id(again.obj) == kept and len(again) == 90_000 and not again.readonly
    assert buffers.kept_bytes == 3 * 2**17  # sizes round up to a power of two


def test_large_frame_buffers_keep_at_most_their_bound_and_a_larger_frame_gets_its_own():
    buffers = LargeFrameBuffers(keep_bytes=2**18, largest=2**17)
    held = [buffers.take(2**17) for _ in range(4)]
    assert buffers.kept_bytes == 2**18  # two kept; the other two are freed with their frames
    huge = buffers.take(2**17 + 1)
    assert len(huge) == 2**17 + 1 and buffers.kept_bytes == 2**18
    assert len({id(v.obj) for v in held}) == 4
    one = LargeFrameBuffers(keep_buffers=1)
    held = [one.take(2**17), one.take(2**17)]
    assert one.kept_bytes == 2**17


def test_shared_large_frame_buffers_come_from_their_place_and_are_renewed_for_every_frame():
    arena = PayloadArena(1, 64 + 4096, 2 * (16 + 2**17))
    sender = arena.sender(0)
    buffers = LargeFrameBuffers(keep_bytes=2**19, largest=2**17)
    buffers.share(sender)
    first = buffers.take(100_000)
    first[:3] = b"abc"
    ref = sender.reference(first[:3])
    assert ref is not None and bytes(arena.receiver().view(ref)) == b"abc", "carved from the arena"
    sender.release(ref)
    kept = id(first.obj)
    del first
    gc.collect()
    again = buffers.take(90_000)
    assert id(again.obj) == kept
    assert not arena.receiver().unchanged(ref), "a new frame in the buffer: a new token"
    held = [again, buffers.take(2**17), buffers.take(2**17)]  # the area holds two: the third is private
    assert sender.reference(held[1][:10]) is not None and sender.reference(held[2][:10]) is None


def test_a_reader_reuses_the_buffer_of_a_large_frame_it_no_longer_hands_out():
    reader = FrameReader(scratch_bytes=SCRATCH)
    [first] = reader.feed(frame(b"a" * (3 * SCRATCH)))
    kept = id(first.obj)
    del first
    [second] = reader.feed(frame(b"b" * (3 * SCRATCH)))
    assert id(second.obj) == kept and bytes(second) == b"b" * (3 * SCRATCH)
