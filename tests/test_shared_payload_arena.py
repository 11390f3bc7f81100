"""The payload arena (``hpbroker/shared/payload_arena.py``): payloads copied in
by their sender and read in place by the owner, slots reused oldest first,
and no reference ever read as something other than what it named, even while
its region is rewritten by another process."""

import multiprocessing
import os
import struct

import pytest

from hpbroker.shared.payload_arena import ArenaRef, PayloadArena, RefusedPayload

REGION = 64 + 4096  # the header and 4 KiB of slots


def test_a_payload_is_read_where_it_lies_or_copied_until_its_slot_is_rewritten():
    arena = PayloadArena(2, REGION)
    sender = arena.sender(1)
    ref = sender.put(b"abc" * 100)
    assert ref is not None and ref.worker == 1 and ref.size == 300
    receiver = arena.receiver()
    view = receiver.view(ref)
    assert view == b"abc" * 100 and view.obj is arena.memory, "a view of the slot, not a copy"
    assert receiver.unchanged(ref)
    copy = receiver.take(ref)
    assert copy == b"abc" * 100 and isinstance(copy, bytearray), "or a private copy"
    sender.release(ref)
    assert sender.put(b"xyz" * 100) is not None  # the same slot, rewritten
    assert not receiver.unchanged(ref)


def test_slots_are_reused_oldest_first_and_a_full_ring_sends_inline():
    arena = PayloadArena(1, REGION)
    sender = arena.sender(0)
    # 1008 bytes of payload take 1024 with the slot's head: four fill the ring
    refs = [sender.put(bytes([i]) * 1008) for i in range(4)]
    assert [r.offset for r in refs if r is not None] == [0, 1024, 2048, 3072]
    assert sender.put(b"x") is None, "no slot free: the payload goes inline"
    assert refs[1] is not None and refs[0] is not None
    sender.release(refs[1])  # out of order: nothing before the oldest is free yet
    assert sender.put(b"x") is None
    sender.release(refs[0])
    wrapped = [sender.put(b"y" * 1008), sender.put(b"w" * 1008)]  # where the two oldest were
    assert [r.offset for r in wrapped if r is not None] == [0, 1024]
    assert sender.put(b"x") is None
    assert [arena.receiver().take(r) for r in wrapped if r is not None] == [b"y" * 1008, b"w" * 1008]
    assert [arena.receiver().take(r) for r in refs[2:] if r is not None] == [b"\2" * 1008, b"\3" * 1008]


def test_an_empty_ring_starts_over_at_the_region_start():
    arena = PayloadArena(1, REGION)
    sender = arena.sender(0)
    for _ in range(10):
        ref = sender.put(b"z" * 500)
        assert ref is not None and ref.offset == 0
        sender.release(ref)
    assert sender.live == 0


def test_a_payload_above_a_quarter_of_the_region_goes_inline():
    sender = PayloadArena(1, REGION).sender(0)
    assert sender.put(b"q" * 1024) is not None
    assert sender.put(b"q" * 1025) is None


def test_a_rewritten_slot_refuses_its_old_reference():
    arena = PayloadArena(1, REGION)
    sender = arena.sender(0)
    old = sender.put(b"old" * 10)
    assert old is not None
    sender.release(old)
    new = sender.put(b"new" * 10)
    assert new is not None and new.offset == old.offset
    with pytest.raises(RefusedPayload, match="rewritten"):
        arena.receiver().take(old)
    assert arena.receiver().take(new) == b"new" * 10


def test_a_restarted_sender_refuses_every_reference_of_its_predecessor():
    arena = PayloadArena(1, REGION)
    before = arena.sender(0).put(b"payload")
    assert before is not None
    arena.sender(0)  # the worker restarted: nothing written yet, the bytes are still there
    with pytest.raises(RefusedPayload):
        arena.receiver().take(before)


@pytest.mark.parametrize("ref", [ArenaRef(2, 0, 1, 1), ArenaRef(-1, 0, 1, 1), ArenaRef(0, 4, 1, 1),
                                 ArenaRef(0, 0, 5000, 1), ArenaRef(0, -8, 1, 1), ArenaRef(0, 0, -1, 1)],
                         ids=["worker", "negative worker", "unaligned", "past the region", "negative offset",
                              "negative size"])
def test_a_reference_to_no_slot_is_refused(ref):
    arena = PayloadArena(2, REGION)
    arena.sender(0).put(b"x")
    with pytest.raises(RefusedPayload):
        arena.receiver().take(ref)


def test_a_worker_forked_later_reads_what_another_wrote():
    arena = PayloadArena(2, REGION)
    ref = arena.sender(0).put(b"from the parent")
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: another worker
        try:
            assert ref is not None
            got = arena.receiver().take(ref)
            back = arena.sender(1).put(bytes(got).upper())
            assert back is not None
            os.write(writer, struct.pack("<5q", *back))
        finally:
            os._exit(0)
    os.close(writer)
    back = ArenaRef(*struct.unpack("<5q", os.read(reader, 40)))
    os.close(reader)
    os.waitpid(pid, 0)
    assert arena.receiver().take(back) == b"FROM THE PARENT"


def _restart_and_rewrite_forever(arena: PayloadArena, size: int) -> None:
    """A sender that restarts again and again, each time writing one slot at the
    region's start whose every byte is its token's low byte."""
    while True:
        sender = arena.sender(0)
        token = sender._next_token  # what put() will stamp
        sender.put(bytes([token & 0xFF]) * size)


def test_no_reader_ever_keeps_a_payload_rewritten_under_it():
    size = 1000
    arena = PayloadArena(1, REGION)
    writer = multiprocessing.get_context("fork").Process(target=_restart_and_rewrite_forever, args=(arena, size),
                                                         daemon=True)
    writer.start()
    kept = refused = 0
    try:
        while kept < 2000 or refused < 200:
            incarnation = struct.unpack_from("<q", arena.memory, 0)[0]
            token = incarnation << 40
            try:
                got = arena.receiver().take(ArenaRef(0, 0, size, token))
            except RefusedPayload:
                refused += 1
                continue
            assert got == bytes([token & 0xFF]) * size, "a torn or foreign payload was kept"
            kept += 1
    finally:
        writer.kill()
        writer.join()


# --- payloads inside frames received into the region ------------------------------------------
FRAMES = 4 * (16 + 8192)  # room for four 8 KiB frame buffers with their heads


def test_a_payload_inside_a_received_frame_goes_by_reference_where_it_lies():
    arena = PayloadArena(2, REGION, FRAMES)
    sender = arena.sender(1)
    buffer = sender.carve(8192)
    assert buffer is not None
    sender.renew(buffer)  # a frame is about to land in it
    frame = memoryview(buffer.data)[:3000]
    frame[:] = bytes(range(256)) * 11 + bytes(184)
    records = frame[100:2100]  # a partition's records inside the request
    ref = sender.reference(records)
    assert ref is not None and ref.head >= 0 and (ref.worker, ref.size) == (1, 2000)
    assert sender.live == 1, "held until its owner answers"
    receiver = arena.receiver()
    view = receiver.view(ref)
    assert view == records and view.obj is arena.memory
    assert receiver.unchanged(ref)
    sender.release(ref)
    assert sender.live == 0
    sender.renew(buffer)  # the next frame: the token moves before any byte does
    assert not receiver.unchanged(ref)
    with pytest.raises(RefusedPayload, match="rewritten"):
        receiver.view(ref)


def test_only_payloads_in_the_senders_frame_buffers_go_by_reference():
    arena = PayloadArena(2, REGION, FRAMES)
    sender, other = arena.sender(0), arena.sender(1)
    theirs = other.carve(8192)
    assert theirs is not None
    assert sender.reference(memoryview(bytearray(100))) is None, "private memory: copied into a slot"
    assert sender.reference(memoryview(theirs.data)[:100]) is None, "another worker's frame"
    assert sender.reference(b"bytes") is None
    ours = sender.carve(8192)
    assert ours is not None
    assert sender.reference(memoryview(ours.data)[:100].toreadonly()) is None
    assert sender.reference(memoryview(ours.data)[:0]) is None


def test_frame_buffers_are_carved_until_the_area_is_used_up():
    sender = PayloadArena(1, REGION, FRAMES).sender(0)
    carved = [sender.carve(8192) for _ in range(5)]
    assert all(b is not None for b in carved[:4]) and carved[4] is None
    assert sender.carve(16) is None


def test_a_restarted_sender_refuses_every_frame_reference_of_its_predecessor():
    arena = PayloadArena(1, REGION, FRAMES)
    sender = arena.sender(0)
    buffer = sender.carve(8192)
    assert buffer is not None
    sender.renew(buffer)
    ref = sender.reference(memoryview(buffer.data)[:10])
    assert ref is not None
    arena.sender(0)  # restarted: the bytes are still there
    with pytest.raises(RefusedPayload):
        arena.receiver().view(ref)


@pytest.mark.parametrize("change", [dict(head=8), dict(head=16), dict(offset=0), dict(size=8192)],
                         ids=["unaligned head", "head in the ring", "before its buffer", "past its buffer"])
def test_a_frame_reference_to_no_payload_is_refused(change):
    arena = PayloadArena(1, REGION, FRAMES)
    sender = arena.sender(0)
    buffer = sender.carve(8192)
    assert buffer is not None
    sender.renew(buffer)
    ref = sender.reference(memoryview(buffer.data)[64:128])
    assert ref is not None
    with pytest.raises(RefusedPayload):
        arena.receiver().view(ref._replace(**change))
