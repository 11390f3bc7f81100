"""Counters in shared memory, one slot per writer.

Python has no atomic add on shared memory, so no slot has two writers: each
worker bumps only its own, and a reader takes all the slots together as one
stamp (``stamp()``), which changes whenever any writer's slot does.
"""

import struct

from hpbroker.shared.region import anonymous

_SLOT = struct.Struct("<q")


class WriterCounters:
    def __init__(self, writers: int):
        self.writers = writers
        self._memory = anonymous(writers * _SLOT.size)

    def bump(self, writer: int) -> None:
        offset = writer * _SLOT.size
        (value,) = _SLOT.unpack_from(self._memory, offset)
        _SLOT.pack_into(self._memory, offset, value + 1)

    def stamp(self) -> bytes:
        """Every slot at once: equal stamps mean no writer moved in between."""
        return self._memory[:self.writers * _SLOT.size]

    def value(self, writer: int) -> int:
        return _SLOT.unpack_from(self._memory, writer * _SLOT.size)[0]


class TopicChanges:
    """What one worker holds of ``WriterCounters``: it bumps its own slot after
    changing the topics on disk, and reads everyone's."""

    def __init__(self, counters: WriterCounters, writer: int):
        self.counters = counters
        self.writer = writer

    def bump(self) -> None:
        self.counters.bump(self.writer)

    def stamp(self) -> bytes:
        return self.counters.stamp()
