"""What the owning worker does for its partitions (the single writer).

Every method other workers may call (``REMOTE_METHODS``) takes plain values
and answers with plain values, most with a named tuple (the result types
below), so the same call works in-process and through the intra-broker
channel (``peers``), which pickles it.  Reads return
where the batches are (segment path, position, size) rather than the bytes:
the worker that holds the client's socket sends them with ``sendfile``
itself, so bytes never cross the channel on the read path.

Errors are members of Kafka's error table (``hpbroker.errors.ErrorCode``);
``ErrorCode.none`` is success.
"""

import asyncio
import logging
import os
import shutil
from typing import NamedTuple

from hpbroker.clock import now_ms
from hpbroker.errors import ErrorCode
from hpbroker.kernels import layout
from hpbroker.records import CorruptRecordError, decode_message_set, encode_batch
from hpbroker.storage import filenames
from hpbroker.storage import LogManager, OffsetOutOfRangeError, StorageError
from hpbroker.server.logs import Throttled
from hpbroker.workers import observe
from hpbroker.workers.topics import TopicRegistry

log = logging.getLogger(__name__)

# ListOffsets special timestamps.
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5


class AppendResult(NamedTuple):
    """Produce, one partition: where the batch went, or why it did not."""
    error: ErrorCode
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    message: str | None = None
    end_offset: int = -1  # one past the batch's last offset: what acks=all waits for


class LocateResult(NamedTuple):
    """Fetch, one partition: where the whole batches from the fetch offset are.
    ``identity`` is the segment file's (device, inode), so the sender reads the
    very file these positions are in."""
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    path: str | None = None
    position: int = 0
    size: int = 0
    identity: tuple[int, int] | None = None


class ListedOffset(NamedTuple):
    """ListOffsets, one partition."""
    error: ErrorCode
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


class PartitionOffsets(NamedTuple):
    """A partition's bounds: its log start and high watermark."""
    error: ErrorCode
    log_start_offset: int = -1
    high_watermark: int = -1
    leader_epoch: int = -1


class EpochEndOffset(NamedTuple):
    """OffsetForLeaderEpoch, one partition."""
    error: ErrorCode
    leader_epoch: int = -1
    end_offset: int = -1


class DeletedRecords(NamedTuple):
    """DeleteRecords, one partition: the log start offset now."""
    error: ErrorCode
    low_watermark: int = -1


class PartitionService:
    # The per-partition operations, each ``method(topic, partition, *args)``:
    # what other workers may ask of the owner, one at a time or in a ``batch``.
    PARTITION_METHODS = frozenset({"append", "locate", "list_offset", "offsets", "end_offset_for_epoch",
                                   "delete_records", "delete_partition"})
    REMOTE_METHODS = PARTITION_METHODS | {"batch", "wait_any", "wait_replicated"}

    def __init__(self, logs: LogManager, topics: TopicRegistry, leader_epoch: int = 0, replicas=None):
        self.logs = logs
        self.topics = topics
        self.leader_epoch = leader_epoch  # standalone: every partition's, for good
        # cluster mode: the ReplicaManager, which says what this broker leads,
        # at which epoch, and where the high watermark is
        self.replicas = replicas
        self._waiters: dict[tuple[str, int], list[asyncio.Future]] = {}
        self._configs_generation = topics.generation
        # a client retrying into a full disk, or resending a bad batch, fails
        # every few milliseconds: one line a minute per partition and cause
        self._rejected = Throttled(log)

    def partition_log(self, topic: str, partition: int):
        """This worker's open ``Log`` of the partition (opened on first use), or
        None when the partition does not exist."""
        found = self.logs.get_log(topic, partition)
        if found is not None or self.replicas is not None:  # a cluster's replicas are made by their roles
            return found
        # Topics are created with all their partition directories, so one that
        # is missing belongs to a topic being deleted (perhaps through another
        # worker, partition by partition): never bring it back by opening it.
        name = filenames.partition_dir_name(topic, partition)
        if not any(os.path.isdir(os.path.join(d, name)) for d in self.logs.log_dirs):
            return None
        info = self.topics.get(topic, partition)
        if info is None or not 0 <= partition < info.partitions:
            return None
        return self.logs.get_or_create_log(topic, partition, topic_id=info.topic_id)

    # --- roles -----------------------------------------------------------------
    def _missing(self, topic: str) -> ErrorCode:
        """No log here: in a cluster, a partition of a known topic is another broker's."""
        if self.replicas is not None and self.topics.get(topic) is not None:
            return ErrorCode.not_leader_or_follower
        return ErrorCode.unknown_topic_or_partition

    def _not_leading(self, topic: str, partition: int) -> bool:
        return self.replicas is not None and not self.replicas.leads(topic, partition)

    def _epoch(self, topic: str, partition: int) -> int:
        return self.leader_epoch if self.replicas is None else self.replicas.leader_epoch(topic, partition)

    def _epoch_error(self, topic: str, partition: int, current_leader_epoch: int) -> ErrorCode | None:
        """A request naming a leader epoch other than ours is behind
        (FENCED_LEADER_EPOCH) or ahead (UNKNOWN_LEADER_EPOCH), as Kafka answers."""
        epoch = self._epoch(topic, partition)
        if current_leader_epoch < 0 or current_leader_epoch == epoch:
            return None
        return ErrorCode.fenced_leader_epoch if current_leader_epoch < epoch else ErrorCode.unknown_leader_epoch

    # --- writing ---------------------------------------------------------------
    def append(self, topic: str, partition: int, records, acks: int = 1) -> AppendResult:
        partition_log = self.partition_log(topic, partition)
        if partition_log is None:
            return AppendResult(self._missing(topic))
        if self._not_leading(topic, partition):
            return AppendResult(ErrorCode.not_leader_or_follower)
        in_sync = 1 if self.replicas is None else self.replicas.isr_size(topic, partition)
        if acks == -1 and self.topics.config_for(topic).min_insync_replicas > in_sync:
            # as Kafka: acks=all is refused, before appending, while fewer
            # replicas are in sync than the topic's min.insync.replicas
            return AppendResult(ErrorCode.not_enough_replicas, log_start_offset=partition_log.log_start_offset,
                                message=f"{topic}-{partition} has {in_sync} in-sync replica(s), below "
                                        f"min.insync.replicas")
        try:
            info = partition_log.append(_as_v2(records), leader_epoch=self._epoch(topic, partition))
        except CorruptRecordError as exc:  # a legacy message set that does not decode
            return self._rejected_append(topic, partition, partition_log, ErrorCode.corrupt_message, exc)
        except StorageError as exc:
            return self._rejected_append(topic, partition, partition_log, exc.error_code, exc)
        except OSError as exc:
            self._rejected.log(logging.ERROR, (topic, partition, ErrorCode.kafka_storage_error),
                               "produce to %s-%d failed writing: %s", topic, partition, exc)
            return AppendResult(ErrorCode.kafka_storage_error, log_start_offset=partition_log.log_start_offset,
                                message=str(exc))
        self.wake(topic, partition)  # long polls on it (standalone: consumers; in a cluster: followers)
        if self.replicas is not None:
            self.replicas.advance(topic, partition)  # an ISR of one: the high watermark moves now
        observe.appended(topic, info.size, info.records)
        return AppendResult(ErrorCode.none, info.first_offset, info.log_append_time, partition_log.log_start_offset,
                            end_offset=info.last_offset + 1)

    def _rejected_append(self, topic, partition, partition_log, error: ErrorCode, exc: Exception) -> AppendResult:
        self._rejected.log(logging.WARNING, (topic, partition, error), "produce to %s-%d rejected: %s",
                           topic, partition, exc)
        return AppendResult(error, log_start_offset=partition_log.log_start_offset, message=str(exc))

    async def batch(self, method: str, calls: list) -> list:
        """``method(*args)`` for each args tuple: one intra-broker round trip for
        all the partitions of a request that this worker owns.  While this
        worker's leaderships are in doubt (a pause noticed, an expired session:
        confirmed within a ZooKeeper round trip or two) the calls wait for the
        answer rather than fail: a refusal would split a producer's pipelined
        requests, the first refused and the next out of sequence."""
        if method not in self.PARTITION_METHODS:
            raise ValueError(f"{method!r} is not a partition method")
        if self.replicas is not None:
            await self.replicas.settled()
        run = getattr(self, method)
        return [run(*args) for args in calls]

    async def wait_replicated(self, wanted: list, timeout_s: float) -> list:
        """acks=all: for each ``(topic, partition, end_offset)``, an ErrorCode
        once the high watermark passed it (standalone: at once, the one replica
        has it)."""
        if self.replicas is None:
            return [ErrorCode.none] * len(wanted)
        return list(await asyncio.gather(*(
            self.replicas.wait_replicated(t, p, end, self.topics.config_for(t).min_insync_replicas, timeout_s)
            for t, p, end in wanted)))

    async def wait_any(self, wanted: list, timeout_s: float, replica: bool = False) -> bool:
        """True once any ``(topic, partition, offset)`` has data at or beyond
        its offset (below the high watermark, unless a ``replica`` asks);
        False after ``timeout_s``."""
        waits = [asyncio.ensure_future(self.wait_beyond(t, p, offset, timeout_s, replica)) for t, p, offset in wanted]
        if not waits:
            return False
        done, pending = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for wait in pending:
            wait.cancel()
        return any(w.result() for w in done if not w.cancelled() and w.exception() is None)

    def wake(self, topic: str, partition: int) -> None:
        """Long polls on the partition look again (new data, a new high watermark, a deletion)."""
        for future in self._waiters.pop((topic, partition), ()):
            if not future.done():
                future.set_result(True)

    # --- reading ---------------------------------------------------------------
    def locate(self, topic: str, partition: int, offset: int, max_bytes: int, replica_id: int = -1,
               current_leader_epoch: int = -1, replica_epoch: int = -1) -> LocateResult:
        """Where the whole batches from ``offset`` are, up to the high watermark
        (a follower, ``replica_id`` >= 0, reads to the log end, and its fetch
        offset tells the leader how far that incarnation, ``replica_epoch``, got).  The file identity lets the
        sender make sure it reads the file these positions are in, even if
        compaction swapped a new file in under the same name meanwhile."""
        partition_log = self.partition_log(topic, partition)
        if partition_log is None:
            return LocateResult(self._missing(topic))
        if self._not_leading(topic, partition):
            return LocateResult(ErrorCode.not_leader_or_follower)
        fenced = self._epoch_error(topic, partition, current_leader_epoch)
        if fenced is not None:
            return LocateResult(fenced)
        if replica_id >= 0 and self.replicas is not None:
            self.replicas.follower_fetched(topic, partition, replica_id, offset, replica_epoch)
        hw = partition_log.high_watermark
        start = partition_log.log_start_offset
        try:
            found = partition_log.read(offset, max_bytes, max_offset=None if replica_id >= 0 else hw)
        except OffsetOutOfRangeError:
            return LocateResult(ErrorCode.offset_out_of_range, hw, hw, start)
        if found is None:
            return LocateResult(ErrorCode.none, hw, hw, start)
        st = os.fstat(found.segment.fd)
        return LocateResult(ErrorCode.none, hw, hw, start, found.segment.log_path, found.position, found.size,
                            (st.st_dev, st.st_ino))

    async def wait_beyond(self, topic: str, partition: int, offset: int, timeout_s: float,
                          replica: bool = False) -> bool:
        """True once the partition holds data at or beyond ``offset`` (below
        the high watermark unless for a ``replica``), or it does now, or this
        broker stopped leading it; False after ``timeout_s``.  For long polls."""
        partition_log = self.partition_log(topic, partition)
        if partition_log is None or self._not_leading(topic, partition):
            return True
        if (partition_log.written_offset if replica else partition_log.high_watermark) > offset:
            return True
        future = asyncio.get_running_loop().create_future()
        self._waiters.setdefault((topic, partition), []).append(future)
        try:
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            return False
        finally:
            waiters = self._waiters.get((topic, partition))
            if waiters and future in waiters:
                waiters.remove(future)

    def list_offset(self, topic: str, partition: int, timestamp: int) -> ListedOffset:
        """Kafka's ListOffsets for one partition."""
        partition_log = self.partition_log(topic, partition)
        if partition_log is None:
            return ListedOffset(self._missing(topic))
        if self._not_leading(topic, partition):
            return ListedOffset(ErrorCode.not_leader_or_follower)
        epoch = self._epoch(topic, partition)
        if timestamp in (LATEST, LATEST_TIERED):
            return ListedOffset(ErrorCode.none, partition_log.high_watermark, -1, epoch)
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return ListedOffset(ErrorCode.none, partition_log.log_start_offset, -1, epoch)
        if timestamp == MAX_TIMESTAMP:
            found = partition_log.offset_of_max_timestamp()
        elif timestamp < 0:
            return ListedOffset(ErrorCode.unknown_server_error)
        else:
            found = partition_log.offset_for_timestamp(timestamp)
        if found is None:
            return ListedOffset(ErrorCode.none, -1, -1, epoch)
        return ListedOffset(ErrorCode.none, found[0], found[1], epoch)

    def offsets(self, topic: str, partition: int) -> PartitionOffsets:
        partition_log = self.partition_log(topic, partition)
        if partition_log is None:
            return PartitionOffsets(self._missing(topic))
        if self._not_leading(topic, partition):
            return PartitionOffsets(ErrorCode.not_leader_or_follower)
        return PartitionOffsets(ErrorCode.none, partition_log.log_start_offset, partition_log.high_watermark,
                                self._epoch(topic, partition))

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int,
                             current_leader_epoch: int = -1) -> EpochEndOffset:
        """OffsetForLeaderEpoch.  A client that names a current leader epoch
        other than ours is told it is behind (FENCED_LEADER_EPOCH) or ahead
        (UNKNOWN_LEADER_EPOCH), as Kafka does."""
        partition_log = self.partition_log(topic, partition)
        if partition_log is None:
            return EpochEndOffset(self._missing(topic))
        if self._not_leading(topic, partition):
            return EpochEndOffset(ErrorCode.not_leader_or_follower)
        fenced = self._epoch_error(topic, partition, current_leader_epoch)
        if fenced is not None:
            return EpochEndOffset(fenced)
        return EpochEndOffset(ErrorCode.none, *partition_log.end_offset_for_epoch(epoch, self._epoch(topic, partition)))

    # --- deleting --------------------------------------------------------------
    def delete_records(self, topic: str, partition: int, offset: int) -> DeletedRecords:
        """DeleteRecords; an ``offset`` of -1 means up to the high watermark."""
        partition_log = self.partition_log(topic, partition)
        if partition_log is None:
            return DeletedRecords(self._missing(topic))
        if self._not_leading(topic, partition):
            return DeletedRecords(ErrorCode.not_leader_or_follower)
        target = partition_log.high_watermark if offset == -1 else offset
        try:
            return DeletedRecords(ErrorCode.none, partition_log.delete_records_before(target))
        except OffsetOutOfRangeError:
            return DeletedRecords(ErrorCode.offset_out_of_range, partition_log.log_start_offset)

    def delete_partition(self, topic: str, partition: int) -> ErrorCode:
        """Remove a partition of a deleted topic, open or not."""
        if self.logs.delete_log(topic, partition):
            self.wake(topic, partition)  # long polls on it answer now
            return ErrorCode.none
        for log_dir in self.logs.log_dirs:
            path = os.path.join(log_dir, filenames.partition_dir_name(topic, partition))
            if os.path.isdir(path):
                doomed = os.path.join(log_dir, filenames.delete_dir_name(topic, partition))
                os.rename(path, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
        self.wake(topic, partition)
        return ErrorCode.none

    def tick(self) -> None:
        self.topics.refresh()  # notice topics deleted or grown through other workers
        if self.topics.generation != self._configs_generation:
            self._configs_generation = self.topics.generation
            self.logs.reconfigure()  # topic settings changed through any worker reach the open logs
        self.logs.tick(now_ms())


def _as_v2(records):
    """Produce v0-v2 carry legacy message sets; the log holds only v2 batches."""
    if records is None or len(records) < 17 or records[16] == 2:
        return records if isinstance(records, (bytearray, memoryview)) else bytearray(records or b"")
    converted = decode_message_set(bytes(records))
    # the first message's codec (a compressed set is one wrapper message): Kafka
    # keeps what the producer chose when it converts to the v2 format
    codec = records[17] & layout.LEGACY_COMPRESSION_MASK
    return bytearray(encode_batch(converted, base_offset=converted[0].offset if converted else 0, compression=codec))
