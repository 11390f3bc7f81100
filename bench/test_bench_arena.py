"""What handing a megabyte of produced records to the worker owning their
partition costs, besides the owner's ``writev`` (which every append pays):

* ``received``: named where the connection received them (``reference`` into
  a frame buffer of the sender's region), read in place by the owner
  (``view``, ``unchanged``): what a large request does now;
* ``slot``: copied into a slot of the ring (``put``), read in place: what a
  small request does;
* ``copied_both_ways``: ``put``, then copied out again by the owner, as every
  request for another worker did before the owner read slots in place;
* ``memcpy``: one copy of the same bytes, for scale.

    .venv/bin/python -m pytest bench/test_bench_arena.py --benchmark-only

``extra_info``: µs per MiB, medians of interleaved rounds.
"""

import time

from hpbroker.shared.payload_arena import PayloadArena

MiB = 1 << 20
ROUNDS, CALLS = 9, 200


def _us_per_call(step) -> float:
    started = time.perf_counter()
    for _ in range(CALLS):
        step()
    return (time.perf_counter() - started) / CALLS * 1e6


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def test_a_megabyte_for_another_worker(benchmark):
    arena = PayloadArena(2, 64 + 8 * MiB, 2 * (16 + 2 * MiB))
    sender, receiver = arena.sender(0), arena.receiver()
    buffer = sender.carve(2 * MiB)
    assert buffer is not None
    sender.renew(buffer)
    frame = memoryview(buffer.data)[:MiB + 100]
    frame[:] = bytes(range(256)) * ((MiB + 100) // 256) + bytes((MiB + 100) % 256)
    records = frame[100:]
    private = bytearray(records)  # what a small request's records are: a copy of the connection's scratch

    def read_by(ref, keep) -> None:
        """The owner's side: the payload read where it lies (or kept as a copy), then checked."""
        assert ref is not None
        got = keep(receiver.view(ref))
        assert receiver.unchanged(ref) and len(got) == MiB
        sender.release(ref)

    def received():
        read_by(sender.reference(records), memoryview)

    def slot():
        read_by(sender.put(private), memoryview)

    def copied_both_ways():
        read_by(sender.put(private), bytearray)

    target = bytearray(MiB)

    def memcpy():
        target[:] = private

    ways = {"received": received, "slot": slot, "copied_both_ways": copied_both_ways, "memcpy": memcpy}
    timings: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(ROUNDS):
        for name, step in ways.items():
            timings[name].append(_us_per_call(step))
    benchmark.pedantic(received, rounds=200)
    benchmark.extra_info.update({f"{name}_us_per_mib": round(_median(xs), 1) for name, xs in timings.items()})
