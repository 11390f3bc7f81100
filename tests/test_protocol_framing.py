"""FrameSplitter: frames split across reads, several per read, sizes out of range."""

import struct

import pytest

from hpbroker.protocol import FrameSplitter, FrameTooLarge, frame


def payloads(frames):
    return [bytes(f) for f in frames]


def test_several_frames_in_one_feed():
    stream = frame(b"one") + frame(b"") + frame(b"three")
    assert payloads(FrameSplitter().feed(stream)) == [b"one", b"", b"three"]


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 7, 64])
def test_any_split_of_the_stream_gives_the_same_frames(chunk):
    bodies = [b"a" * 10, b"b" * 300, b"", b"c"]
    stream = b"".join(frame(b) for b in bodies)
    splitter = FrameSplitter()
    got = []
    for i in range(0, len(stream), chunk):
        got += payloads(splitter.feed(stream[i:i + chunk]))
    assert got == bodies
    assert splitter.buffered == 0


def test_partial_frame_is_buffered_not_an_error():
    splitter = FrameSplitter()
    data = frame(b"hello world")
    assert splitter.feed(data[:2]) == []       # inside the size prefix
    assert splitter.feed(data[2:7]) == []      # inside the body
    assert splitter.buffered == 7
    assert payloads(splitter.feed(data[7:] + frame(b"x")[:3])) == [b"hello world"]
    assert splitter.buffered == 3


def test_frames_survive_reuse_of_the_callers_buffer():
    buf = bytearray(frame(b"keep me"))
    [got] = FrameSplitter().feed(buf)
    buf[:] = b"\x00" * len(buf)
    assert bytes(got) == b"keep me"


def test_memoryview_input():
    assert payloads(FrameSplitter().feed(memoryview(frame(b"mv")))) == [b"mv"]


def test_size_at_the_limit_is_accepted_above_is_refused():
    splitter = FrameSplitter(max_frame_bytes=8)
    assert payloads(splitter.feed(frame(b"12345678"))) == [b"12345678"]
    with pytest.raises(FrameTooLarge) as info:
        splitter.feed(frame(b"123456789"))
    assert info.value.size == 9 and info.value.limit == 8
    assert "socket.request.max.bytes" in str(info.value)


def test_oversize_is_detected_from_the_prefix_alone():
    # A client announcing 2 GiB must be refused before anything is buffered.
    with pytest.raises(FrameTooLarge):
        FrameSplitter().feed(struct.pack(">i", 104857601))


def test_default_limit_is_kafkas():
    assert FrameSplitter().max_frame_bytes == 104857600


def test_negative_size_is_refused_and_the_splitter_stays_failed():
    splitter = FrameSplitter()
    with pytest.raises(FrameTooLarge):
        splitter.feed(struct.pack(">i", -1) + b"junk")
    with pytest.raises(FrameTooLarge):
        splitter.feed(frame(b"fine"))


def test_oversize_detected_when_prefix_arrives_in_pieces():
    splitter = FrameSplitter(max_frame_bytes=100)
    prefix = struct.pack(">i", 101)
    assert splitter.feed(prefix[:3]) == []
    with pytest.raises(FrameTooLarge):
        splitter.feed(prefix[3:])
