"""What the group and the transaction coordinators share: their state is the
replay of this worker's partitions of an internal compacted topic
(``__consumer_offsets``, ``__transaction_state``), and every call first
checks that its key's partition is owned here, led here and loaded.

* A partition this broker leads when the worker starts is replayed in the
  background; until then its keys are answered COORDINATOR_LOAD_IN_PROGRESS,
  which every client retries in place.  One created later is short and is
  replayed inline on first use.
* While the worker's leaderships are in doubt (a fenced session) the answer
  is COORDINATOR_LOAD_IN_PROGRESS too: this broker is still the one
  FindCoordinator names, so the client must wait here, not look elsewhere
  (librdkafka does not retry an OffsetFetch answered NOT_COORDINATOR).
* A leadership change voids what was loaded and any replay under way; the
  subclass drops its state for the partition (``_forget``).
"""

from __future__ import annotations

import asyncio
import logging

from hpbroker.errors import ErrorCode
from hpbroker.records import iter_batches
from hpbroker.server.ownership import partition_owner
from hpbroker.storage import OffsetOutOfRangeError

log = logging.getLogger(__name__)

LOAD_CHUNK_BYTES = 1 << 20
LOAD_RETRY_S = (1.0, 30.0)  # a failed replay is tried again after this, doubling, capped


class StatePartitions:
    """Base of a coordinator over ``topic``'s partitions this worker owns.
    Subclasses replay a partition in ``_replay`` (a generator over
    ``_chunks``), drop one in ``_forget``, and may act once one is loaded
    (``_loaded_now``)."""

    def __init__(self, partitions, topics, topic: str, partition_count: int, index: int, workers: int,
                 leads=None, fenced=None):
        self.partitions = partitions  # this worker's Partitions: append(), log_of(), resolve()
        self.topics = topics
        self.topic = topic
        self.partition_count = partition_count
        self.index = index
        self.workers = workers
        # in a cluster, only the leader of a partition coordinates its keys, and not while
        # its leadership is fenced (``ReplicaManager.leads`` and ``in_doubt``)
        self._leads = leads or (lambda topic, partition: True)
        self._fenced = fenced or (lambda topic, partition: False)
        self._loaded: set[int] = set()
        self._loading: set[int] = set()
        self._changes: dict[int, int] = {}  # leadership changes per partition: a replay begun before is void
        self._tasks: set[asyncio.Task] = set()
        self._closed = False

    # --- to override -----------------------------------------------------------------------
    def _replay(self, p: int):
        """Apply partition ``p``'s records, yielding after each chunk."""
        raise NotImplementedError

    def _forget(self, p: int) -> None:
        """Drop what is cached of partition ``p`` (its leadership changed)."""

    def _loaded_now(self, p: int) -> None:
        """Partition ``p`` has just been loaded."""

    # --- loading ------------------------------------------------------------------------------
    def _owned(self) -> list[int]:
        return [p for p in range(self.partition_count) if partition_owner(self.topic, p, self.workers) == self.index]

    def _load_led(self) -> None:
        """Replay, in the background, the owned partitions that exist and this broker leads."""
        if self.topics.get(self.topic) is not None:
            for p in self._owned():
                if self._leads(self.topic, p) or self._fenced(self.topic, p):
                    self._load_in_background(p)

    def _load_in_background(self, p: int) -> None:
        self._loading.add(p)
        self._spawn(self._load_async(p))

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _load_async(self, p: int, failures: int = 0) -> None:
        change = self._changes.get(p, 0)
        try:
            for _ in self._replay(p):
                await asyncio.sleep(0)  # let calls for loaded partitions through
                if self._changes.get(p, 0) != change:
                    return  # leadership changed meanwhile: what was applied is dropped, and it is replayed afresh
        except Exception:
            # half a state is worse than none (a decided transaction never finished, an open one
            # never timed out): its keys stay "loading", and the whole replay is tried again
            delay = min(LOAD_RETRY_S[0] * 2 ** failures, LOAD_RETRY_S[1])
            log.exception("loading %s-%d failed; trying again in %g s", self.topic, p, delay)
            self._forget(p)
            await asyncio.sleep(delay)
            if self._changes.get(p, 0) == change and not self._closed:
                self._spawn(self._load_async(p, failures + 1))
            return
        if self._changes.get(p, 0) == change:
            self._loading.discard(p)
            self._loaded.add(p)
            self._loaded_now(p)

    def _chunks(self, p: int):
        """Partition ``p``'s batches from its log start, one chunk at a time."""
        partition_log = self.partitions.log_of(self.topic, p)
        offset = partition_log.log_start_offset if partition_log is not None else 0
        while partition_log is not None and offset < partition_log.written_offset:
            try:
                data = partition_log.read_records(max(offset, partition_log.log_start_offset), LOAD_CHUNK_BYTES)
            except OffsetOutOfRangeError:
                offset = partition_log.log_start_offset
                continue
            batches = list(iter_batches(data, allow_partial_tail=True))
            before = offset
            if batches:
                offset = batches[-1].header.next_offset
            if offset <= before:
                break
            yield batches

    # --- the check every call makes ------------------------------------------------------------
    def _check_partition(self, p: int) -> ErrorCode:
        """None-error when keys of partition ``p`` are coordinated here and loaded."""
        if self._closed or partition_owner(self.topic, p, self.workers) != self.index:
            return ErrorCode.not_coordinator
        if not self._leads(self.topic, p):
            return (ErrorCode.coordinator_load_in_progress if self._fenced(self.topic, p)
                    else ErrorCode.not_coordinator)
        if p in self._loading:
            return ErrorCode.coordinator_load_in_progress
        if p not in self._loaded:
            if self.topics.get(self.topic) is None:
                return ErrorCode.coordinator_not_available  # FindCoordinator creates it
            for _ in self._replay(p):  # created after this worker started, so short: inline
                pass
            self._loaded.add(p)
            self._loaded_now(p)
        return ErrorCode.none

    def leadership_changed(self, p: int, leading: bool) -> None:
        """This broker started or stopped leading partition ``p``: what is cached of
        it is stale either way, and a replay in progress is abandoned."""
        self._changes[p] = self._changes.get(p, 0) + 1
        self._loading.discard(p)
        self._loaded.discard(p)
        self._forget(p)
