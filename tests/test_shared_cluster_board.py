"""The cluster board (``hpbroker/shared/cluster_board.py``): the image and the
session's state as the acceptor publishes them, read whole by the workers,
never torn, even while another process publishes as fast as it can."""

import hashlib
import multiprocessing
import os
import select
import time

import pytest

from hpbroker.shared.cluster_board import ClusterBoard, ImageTooLarge


def image(n: int, size: int) -> bytes:
    """``size`` bytes that say which publication they are and check themselves."""
    body = (b"%08d" % n) * (size // 8)
    return hashlib.sha256(body).digest() + body


def intact(data: bytes) -> bool:
    return hashlib.sha256(data[32:]).digest() == data[:32]


def test_nothing_is_read_before_the_first_publication():
    assert ClusterBoard(1, half_bytes=4096).read() is None


def test_a_reader_gets_the_image_once_per_generation_and_the_session_always():
    board = ClusterBoard(2, half_bytes=4096)
    assert board.publish(b"first", 0) == 1
    found = board.read()
    assert found is not None and (found.generation, found.session, found.image) == (1, 0, b"first")
    assert board.read(known_generation=1) == (1, 0, None)
    assert board.publish(None, 1) == 2  # the session changed, the image did not
    assert board.read(known_generation=1) == (2, 1, b"first")
    assert board.publish(b"second", 0) == 3
    assert board.read(known_generation=2) == (3, 0, b"second")
    assert board.publish(b"third", 2) == 4  # written where the first was
    assert board.read() == (4, 2, b"third")


def test_an_image_too_large_is_refused_and_the_current_one_stays():
    board = ClusterBoard(1, half_bytes=4096)
    board.publish(b"kept", 0)
    with pytest.raises(ImageTooLarge):
        board.publish(b"x" * 4097, 0)
    assert board.read() == (1, 0, b"kept")


def test_each_worker_is_woken_by_its_own_eventfd():
    board = ClusterBoard(3, half_bytes=4096)
    board.publish(b"a", 0)
    board.publish(b"b", 0)
    readable, _, _ = select.select(board.wakeups, [], [], 0)
    assert sorted(readable) == sorted(board.wakeups)
    for fd in board.wakeups:
        ClusterBoard.drain(fd)
        ClusterBoard.drain(fd)  # nothing pending: no error
    assert select.select(board.wakeups, [], [], 0)[0] == []


def test_the_session_is_tracked_until_the_renewed_deadline():
    board = ClusterBoard(1, half_bytes=4096)
    assert not board.tracked()  # never renewed
    board.renew(time.monotonic() + 60)
    assert board.tracked()
    board.renew(time.monotonic() - 1)
    assert not board.tracked()
    assert board.tracked(now=board.tracked_until() - 0.5)


def test_a_writer_stopped_mid_publication_leaves_readers_the_last_whole_image_or_none():
    board = ClusterBoard(1, half_bytes=4096)
    board.publish(b"whole", 0)
    board._words[0] += 1  # the counter odd, as a writer killed between its two bumps leaves it
    assert board.read() is None  # never a half-written header
    board._words[0] += 1
    assert board.read() == (1, 0, b"whole")


def _publish_forever(board: ClusterBoard, count: int, size: int) -> None:
    for n in range(1, count + 1):
        board.publish(image(n, size + (n % 7) * 512), n % 3)
    os._exit(0)


def test_images_read_while_another_process_publishes_are_never_torn():
    board = ClusterBoard(1, half_bytes=64 << 10)
    board.publish(image(0, 32 << 10), 0)
    writer = multiprocessing.get_context("fork").Process(target=_publish_forever, args=(board, 20000, 32 << 10))
    writer.start()
    reads, last = 0, 0
    try:
        while writer.is_alive() or reads == 0:
            found = board.read()
            if found is None:
                continue  # every try torn: allowed, never a torn image
            assert found.image is not None and intact(found.image), f"a torn image at generation {found.generation}"
            assert found.generation >= last
            assert found.session == (found.generation - 1) % 3
            last = found.generation
            reads += 1
    finally:
        writer.join(30)
    assert writer.exitcode == 0
    assert reads > 100 and last > 1
    final = board.read()
    assert final is not None and final.generation == 20001
