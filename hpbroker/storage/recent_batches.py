"""Whole batches located from a list of recent ones, without the index.

A segment keeps where its last written batches are, ``(base offset, next
offset, position, size)`` each, oldest first, the newest ending where the
segment's written bytes end (``LogSegment.recent``); its owner publishes the
same list in shared memory.  ``whole_batches`` answers from such a list what
``LogSegment.read`` answers by the index and a scan: the segment reads a
follower's or consumer's fetch at the tail with it, and a worker holding a
consumer's connection locates from the published list without asking the
owner (``handlers/fetch.py``).  Spans are measured by position, so a batch
missing from the list between two listed ones is still counted whole.
"""

from __future__ import annotations

import itertools

NOT_COVERED = object()  # the offset is not among the batches: ask the index


def whole_batches(batches, offset: int, max_bytes: int, max_offset: int | None, min_one: bool):
    """``(position, length)`` of the whole batches from the one holding
    ``offset``: at most ``max_bytes`` unless ``min_one`` and the first alone is
    larger, none starting at or above ``max_offset``; None when there is none;
    ``NOT_COVERED`` when ``offset`` is older than the first batch or past the last."""
    if not batches or offset < batches[0][0]:
        return NOT_COVERED
    for first, (base, next_offset, position, size) in enumerate(batches):
        if next_offset > offset:
            break
    else:
        return NOT_COVERED
    if max_offset is not None and base >= max_offset:
        return None
    end = position
    for later_base, _next, at, length in itertools.islice(batches, first, None):
        if at + length - position > max_bytes or (max_offset is not None and later_base >= max_offset):
            break
        end = at + length
    if end > position:
        return position, end - position
    return (position, size) if min_one else None
