"""One partition as its owning worker holds it: the log, and the role it plays.

The role says what may be done with the partition here (Kafka's
``Partition``):

* STANDALONE: this broker is its only replica and leads it for good (no
  ZooKeeper); the high watermark is the log end.
* LEADER: the cluster image names this broker leader at ``leader_epoch``;
  ``leadership`` keeps the followers' progress, the ISR and the high
  watermark (``replication/isr.py``'s rules).  Acting as leader also needs
  the worker's leaderships not to be in doubt (``trusted``: its session
  expired, or a pause was noticed, and the states are being read again).
* FOLLOWER: another broker leads; this one copies from it (a fetcher).
* OFFLINE: assigned here, but no leader elected.

Every client operation goes through ``leader_error`` first: one guard, here,
not one per operation.  A consumer's read (``locate``) only reads; a
follower's fetch position is recorded by ``follower_fetched``, which the
owner calls for a follower's Fetch before it locates (``partitions.py``).
"""

from __future__ import annotations

import enum
import logging
import os
from dataclasses import dataclass, replace

from hpbroker.cluster import znodes
from hpbroker.errors import ErrorCode
from hpbroker.kernels import layout
from hpbroker.records import CorruptRecordError, decode_message_set, encode_batch
from hpbroker.replication.isr import LeaderState
from hpbroker.sentinels import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED, MAX_TIMESTAMP
from hpbroker.server.logging_setup import Throttled
from hpbroker.storage import OffsetOutOfRangeError, StorageError
from hpbroker.storage.log import ORIGIN_CLIENT
from hpbroker.workers import observe
from hpbroker.workers.owner_calls import (
    AppendResult,
    DeletedRecords,
    EpochEndOffset,
    ListedOffset,
    LocateResult,
    PartitionBoundsResult,
)
from hpbroker.workers.publisher import UNPUBLISHED

log = logging.getLogger(__name__)
# a client retrying into a full disk, or resending a bad batch, fails every few
# milliseconds: one line a minute per partition and cause
_rejected = Throttled(log)


class Role(enum.Enum):
    STANDALONE = "standalone"
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


@dataclass
class Leadership:
    """A leader's view of its followers, and the state znode it last read or wrote
    (the base of its next version-checked ISR write)."""
    state: LeaderState
    znode: znodes.PartitionState
    proposing: bool = False  # an ISR write is in flight


class Partition:
    def __init__(self, topic: str, index: int, log, *, role: Role = Role.STANDALONE, leader_epoch: int = 0,
                 trusted=lambda: True, publisher=UNPUBLISHED):
        self.topic = topic
        self.index = index
        self.log = log
        self.role = role
        self.leader_epoch = leader_epoch
        self.leadership: Leadership | None = None  # LEADER only
        self.leader_id = -1  # FOLLOWER: the broker it copies from
        self.trusted = trusted  # () -> bool: the worker's leaderships are not in doubt
        self.publisher = publisher  # the shared partition table, rewritten whenever the offsets move
        # producer id -> (epoch, guard): transactional produces verified with the coordinator
        # (KIP-890); a marker for the producer ends its guard, so a produce verified before
        # the marker cannot land after it, in a transaction nobody will end
        self.txn_guards: dict[int, tuple[int, int]] = {}
        log.on_offsets_changed = self.publish
        self.publish()

    def publish(self) -> None:
        """Tell the other workers this partition's role and offsets (``publisher.py``)."""
        self.publisher.publish(self)

    @property
    def key(self) -> tuple[str, int]:
        return self.topic, self.index

    def __repr__(self) -> str:
        return f"<Partition {self.topic}-{self.index} {self.role.value} epoch {self.leader_epoch}>"

    # --- the guard -------------------------------------------------------------------
    def leads(self) -> bool:
        """It may act as leader now."""
        return self.role is Role.STANDALONE or (self.role is Role.LEADER and self.trusted())

    def in_doubt(self) -> bool:
        """The image makes it leader, but the worker's leaderships are in doubt for now."""
        return self.role is Role.LEADER and not self.trusted()

    def leader_error(self, current_leader_epoch: int = -1) -> ErrorCode | None:
        """None when a client's request may be served here as by the leader; else
        NOT_LEADER_OR_FOLLOWER, or, for a request naming another leader epoch than
        ours, FENCED_LEADER_EPOCH (it is behind) or UNKNOWN_LEADER_EPOCH (ahead)."""
        if not self.leads():
            return ErrorCode.not_leader_or_follower
        if current_leader_epoch < 0 or current_leader_epoch == self.leader_epoch:
            return None
        return ErrorCode.fenced_leader_epoch if current_leader_epoch < self.leader_epoch else \
            ErrorCode.unknown_leader_epoch

    def isr_size(self) -> int:
        if self.role is Role.STANDALONE:
            return 1
        return len(self.leadership.state.isr) if self.leadership is not None else 0

    # --- writing -----------------------------------------------------------------------
    def append(self, records, acks: int, min_insync: int, origin: str = ORIGIN_CLIENT,
               group_commit: bool = False, unchanged=None) -> AppendResult:
        """Produce: the batches appended at the next offsets (the caller checked
        ``leader_error``).  acks=all is refused before appending while fewer
        replicas are in sync than ``min_insync``, as Kafka does.  ``origin``
        is the log's: a coordinator's own writes (markers, transactional
        offsets) are ``ORIGIN_COORDINATOR``.  ``group_commit`` and
        ``unchanged`` (records in memory another worker owns): see
        ``Log.append``; the result says whether its fsync is still to come."""
        partition_log = self.log
        in_sync = self.isr_size()
        if acks == -1 and min_insync > in_sync:
            return AppendResult(ErrorCode.not_enough_replicas, log_start_offset=partition_log.log_start_offset,
                                message=f"{self.topic}-{self.index} has {in_sync} in-sync replica(s), below "
                                        f"min.insync.replicas")
        try:
            info = partition_log.append(_as_v2(records), leader_epoch=self.leader_epoch, origin=origin,
                                        group_commit=group_commit, unchanged=unchanged)
        except CorruptRecordError as exc:  # a legacy message set that does not decode
            return self._rejected(ErrorCode.corrupt_message, exc)
        except StorageError as exc:
            return self._rejected(exc.error_code, exc)
        except OSError as exc:
            _rejected.log(logging.ERROR, (self.key, ErrorCode.kafka_storage_error),
                          "produce to %s-%d failed writing: %s", self.topic, self.index, exc)
            return AppendResult(ErrorCode.kafka_storage_error, log_start_offset=partition_log.log_start_offset,
                                message=str(exc))
        observe.appended(self.topic, info.size, info.records)
        end = info.last_offset + 1
        return AppendResult(ErrorCode.none, info.first_offset, info.log_append_time, partition_log.log_start_offset,
                            end_offset=end, durable=not partition_log.owes_flush(end))

    def _rejected(self, error: ErrorCode, exc: Exception) -> AppendResult:
        _rejected.log(logging.WARNING, (self.key, error), "produce to %s-%d rejected: %s", self.topic, self.index, exc)
        return AppendResult(error, log_start_offset=self.log.log_start_offset, message=str(exc))

    def delete_records(self, offset: int) -> DeletedRecords:
        """DeleteRecords on the leader; an ``offset`` of -1 means up to the high watermark."""
        target = self.log.high_watermark if offset == -1 else offset
        try:
            return DeletedRecords(ErrorCode.none, self.log.delete_records_before(target))
        except OffsetOutOfRangeError:
            return DeletedRecords(ErrorCode.offset_out_of_range, self.log.log_start_offset)

    def replicas_log_start(self) -> int:
        """The least log start offset over the ISR (what DeleteRecords waits for)."""
        starts = [self.log.log_start_offset]
        if self.role is Role.LEADER and self.leadership is not None:
            for replica in self.leadership.state.isr:
                progress = self.leadership.state.followers.get(replica)
                if progress is not None:
                    starts.append(progress.log_start)
        return min(starts)

    # --- reading -----------------------------------------------------------------------
    def locate(self, offset: int, max_bytes: int, *, to_log_end: bool = False,
               read_committed: bool = False) -> LocateResult:
        """Where the whole batches from ``offset`` are, up to the high watermark (a
        follower reads ``to_log_end``; a read_committed consumer to the last
        stable offset, and is told the aborted transactions there).  The file
        identity lets the sender make sure it reads the file these positions are
        in, even if compaction swapped a new file in under the same name meanwhile."""
        partition_log = self.log
        hw = partition_log.high_watermark
        lso = partition_log.last_stable_offset
        start = partition_log.log_start_offset
        limit = None if to_log_end else lso if read_committed else hw
        aborted = None
        if read_committed:
            # every abort that may reach into what is read (Kafka bounds it by the
            # end of the bytes read; a wider list is harmless: a client drops only
            # the batches it gets)
            aborted = [(t.producer_id, t.first_offset) for t in partition_log.aborted_transactions(offset, lso)]
        try:
            found = partition_log.read(offset, max_bytes, max_offset=limit)
        except OffsetOutOfRangeError:
            return LocateResult(ErrorCode.offset_out_of_range, hw, lso, start)
        if found is None:
            return LocateResult(ErrorCode.none, hw, lso, start, aborted=aborted)
        st = os.fstat(found.segment.fd)
        return LocateResult(ErrorCode.none, hw, lso, start, found.segment.log_path, found.position, found.size,
                            (st.st_dev, st.st_ino), aborted)

    def has_data_beyond(self, offset: int, replica: bool) -> bool:
        """Data at or beyond ``offset`` exists (below the high watermark unless for
        a replica), or a wait on it is over: it is no longer led here."""
        if not self.leads():
            return True
        return (self.log.written_offset if replica else self.log.high_watermark) > offset

    def list_offset(self, timestamp: int, read_committed: bool = False) -> ListedOffset:
        """Kafka's ListOffsets for one partition (latest, for read_committed: the last stable offset)."""
        partition_log, epoch = self.log, self.leader_epoch
        if timestamp in (LATEST, LATEST_TIERED):
            latest = partition_log.last_stable_offset if read_committed else partition_log.high_watermark
            return ListedOffset(ErrorCode.none, latest, -1, epoch)
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

    def bounds(self) -> PartitionBoundsResult:
        return PartitionBoundsResult(ErrorCode.none, self.log.log_start_offset, self.log.high_watermark,
                                     self.leader_epoch)

    def epoch_end(self, epoch: int) -> EpochEndOffset:
        """OffsetForLeaderEpoch: the end of the largest epoch at or below ``epoch``."""
        return EpochEndOffset(ErrorCode.none, *self.log.end_offset_for_epoch(epoch, self.leader_epoch))

    # --- the leader's followers ----------------------------------------------------------
    def follower_fetched(self, replica: int, replica_epoch: int, offset: int, log_start: int, now: int) -> bool:
        """A follower's fetch from ``offset``: it holds everything below it.  False
        when this partition is not led here (the fetch is answered with the error)."""
        if self.role is not Role.LEADER or self.leadership is None:
            return False
        self.leadership.state.follower_fetched(replica, offset, self.log.written_offset, now, replica_epoch,
                                               log_start)
        return True

    def replicated(self, end_offset: int) -> bool:
        """acks=all: the high watermark has passed ``end_offset``, or the wait is over."""
        return not self.leads() or self.log.high_watermark >= end_offset


def _as_v2(records):
    """Produce v0-v2 carry legacy message sets; the log holds only v2 batches."""
    if records is None or len(records) < 17 or records[16] == 2:
        return records if isinstance(records, (bytearray, memoryview)) else bytearray(records or b"")
    # The offsets a producer writes mean nothing to the broker, which numbers the
    # records itself: Sarama writes 0 for every message, librdkafka 0, 1, 2, ...
    converted = [replace(record, offset=i) for i, record in enumerate(decode_message_set(bytes(records)))]
    # the first message's codec (a compressed set is one wrapper message): Kafka
    # keeps what the producer chose when it converts to the v2 format
    codec = records[17] & layout.LEGACY_COMPRESSION_MASK
    return bytearray(encode_batch(converted, compression=codec))
