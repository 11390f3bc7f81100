"""What the owning worker does for its partitions (the single writer).

Every method takes plain values and returns plain tuples, so the same call
works in-process and through the intra-broker channel (``peers``).  Reads
return where the batches are (segment path, position, size) rather than the
bytes: the worker that holds the client's socket sends them with ``sendfile``
itself, so bytes never cross the channel on the read path.

Error codes are Kafka's (ints); 0 is success.
"""

import asyncio
import logging
import os
import shutil

from hpbroker.kernels import layout
from hpbroker.records import CorruptRecordError, decode_message_set, encode_batch
from hpbroker.storage import filenames
from hpbroker.storage import LogManager, OffsetOutOfRangeError, StorageError
from hpbroker.storage.log import now_ms
from hpbroker.server.logs import Throttled
from hpbroker.workers import observe
from hpbroker.workers.topics import TopicRegistry

log = logging.getLogger(__name__)

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
UNKNOWN_SERVER_ERROR = -1

# ListOffsets special timestamps.
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5

class PartitionService:
    def __init__(self, logs: LogManager, topics: TopicRegistry, leader_epoch: int = 0):
        self.logs = logs
        self.topics = topics
        self.leader_epoch = leader_epoch
        self._waiters: dict[tuple[str, int], list[asyncio.Future]] = {}
        self._configs_generation = topics.generation
        self.groups = None  # this worker's GroupCoordinator, reached as "groups.<method>"
        # a client retrying into a full disk, or resending a bad batch, fails
        # every few milliseconds: one line a minute per partition and cause
        self._rejected = Throttled(log)

    def _log(self, topic: str, partition: int):
        found = self.logs.get_log(topic, partition)
        if found is not None:
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

    # --- writing ---------------------------------------------------------------
    def append(self, topic: str, partition: int, records) -> tuple:
        """Returns (error, base offset, log append time, log start offset, message)."""
        partition_log = self._log(topic, partition)
        if partition_log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, None
        try:
            info = partition_log.append(_as_v2(records), leader_epoch=self.leader_epoch)
        except CorruptRecordError as exc:  # a legacy message set that does not decode
            self._rejected.log(logging.WARNING, (topic, partition, CORRUPT_MESSAGE), "produce to %s-%d rejected: %s",
                               topic, partition, exc)
            return CORRUPT_MESSAGE, -1, -1, partition_log.log_start_offset, str(exc)
        except StorageError as exc:
            self._rejected.log(logging.WARNING, (topic, partition, exc.error_code), "produce to %s-%d rejected: %s",
                               topic, partition, exc)
            return exc.error_code, -1, -1, partition_log.log_start_offset, str(exc)
        except OSError as exc:
            self._rejected.log(logging.ERROR, (topic, partition, KAFKA_STORAGE_ERROR),
                               "produce to %s-%d failed writing: %s", topic, partition, exc)
            return KAFKA_STORAGE_ERROR, -1, -1, partition_log.log_start_offset, str(exc)
        self._wake(topic, partition)
        observe.appended(topic, info.size, info.records)
        return NONE, info.first_offset, info.log_append_time, partition_log.log_start_offset, None

    def batch(self, method: str, calls: list) -> list:
        """``method(*args)`` for each args tuple: one intra-broker round trip for
        all the partitions of a request that this worker owns."""
        run = getattr(self, method)
        return [run(*args) for args in calls]

    async def wait_any(self, wanted: list, timeout_s: float) -> bool:
        """True once any ``(topic, partition, offset)`` has data at or beyond
        its offset; False after ``timeout_s``."""
        waits = [asyncio.ensure_future(self.wait_beyond(t, p, offset, timeout_s)) for t, p, offset in wanted]
        if not waits:
            return False
        done, pending = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        for wait in pending:
            wait.cancel()
        return any(w.result() for w in done if not w.cancelled() and w.exception() is None)

    def _wake(self, topic: str, partition: int) -> None:
        for future in self._waiters.pop((topic, partition), ()):
            if not future.done():
                future.set_result(True)

    # --- reading ---------------------------------------------------------------
    def locate(self, topic: str, partition: int, offset: int, max_bytes: int) -> tuple:
        """Where the whole batches from ``offset`` are, up to the high watermark:
        (error, high watermark, last stable offset, log start, path, position,
        size, file identity).  The identity (device, inode) lets the sender make
        sure it reads the file these positions are in, even if compaction swapped
        a new file in under the same name meanwhile."""
        partition_log = self._log(topic, partition)
        if partition_log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1, None, 0, 0, None
        hw = partition_log.written_offset
        start = partition_log.log_start_offset
        try:
            found = partition_log.read(offset, max_bytes)
        except OffsetOutOfRangeError:
            return OFFSET_OUT_OF_RANGE, hw, hw, start, None, 0, 0, None
        if found is None:
            return NONE, hw, hw, start, None, 0, 0, None
        st = os.fstat(found.segment.fd)
        return NONE, hw, hw, start, found.segment.log_path, found.position, found.size, (st.st_dev, st.st_ino)

    async def wait_beyond(self, topic: str, partition: int, offset: int, timeout_s: float) -> bool:
        """True once the partition holds data at or beyond ``offset`` (or it
        does now); False after ``timeout_s``.  For long-poll fetches."""
        partition_log = self._log(topic, partition)
        if partition_log is None or partition_log.written_offset > offset:
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

    def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple:
        """Kafka's ListOffsets for one partition: (error, offset, timestamp, leader epoch)."""
        partition_log = self._log(topic, partition)
        if partition_log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
        epoch = self.leader_epoch
        if timestamp in (LATEST, LATEST_TIERED):
            return NONE, partition_log.written_offset, -1, epoch
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return NONE, partition_log.log_start_offset, -1, epoch
        if timestamp == MAX_TIMESTAMP:
            found = partition_log.offset_of_max_timestamp()
        elif timestamp < 0:
            return UNKNOWN_SERVER_ERROR, -1, -1, -1
        else:
            found = partition_log.offset_for_timestamp(timestamp)
        if found is None:
            return NONE, -1, -1, epoch
        return NONE, found[0], found[1], epoch

    def offsets(self, topic: str, partition: int) -> tuple:
        """(error, log start, high watermark, leader epoch)."""
        partition_log = self._log(topic, partition)
        if partition_log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1, -1
        return NONE, partition_log.log_start_offset, partition_log.written_offset, self.leader_epoch

    def end_offset_for_epoch(self, topic: str, partition: int, epoch: int, current_leader_epoch: int = -1) -> tuple:
        """OffsetForLeaderEpoch: (error, leader epoch, end offset).  A client
        that names a current leader epoch other than ours is told it is behind
        (FENCED_LEADER_EPOCH) or ahead (UNKNOWN_LEADER_EPOCH), as Kafka does."""
        partition_log = self._log(topic, partition)
        if partition_log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        if current_leader_epoch >= 0 and current_leader_epoch != self.leader_epoch:
            error = FENCED_LEADER_EPOCH if current_leader_epoch < self.leader_epoch else UNKNOWN_LEADER_EPOCH
            return error, -1, -1
        return (NONE, *partition_log.end_offset_for_epoch(epoch, self.leader_epoch))

    # --- deleting --------------------------------------------------------------
    def delete_records(self, topic: str, partition: int, offset: int) -> tuple:
        """DeleteRecords: (error, new low watermark); -1 means up to the high watermark."""
        partition_log = self._log(topic, partition)
        if partition_log is None:
            return UNKNOWN_TOPIC_OR_PARTITION, -1
        target = partition_log.written_offset if offset == -1 else offset
        try:
            return NONE, partition_log.delete_records_before(target)
        except OffsetOutOfRangeError:
            return OFFSET_OUT_OF_RANGE, partition_log.log_start_offset

    def delete_partition(self, topic: str, partition: int) -> int:
        """Remove a partition of a deleted topic, open or not."""
        if self.logs.delete_log(topic, partition):
            self._wake(topic, partition)  # long polls on it answer now
            return NONE
        for log_dir in self.logs.log_dirs:
            path = os.path.join(log_dir, filenames.partition_dir_name(topic, partition))
            if os.path.isdir(path):
                doomed = os.path.join(log_dir, filenames.delete_dir_name(topic, partition))
                os.rename(path, doomed)
                shutil.rmtree(doomed, ignore_errors=True)
        self._wake(topic, partition)
        return NONE

    def tick(self) -> None:
        self.topics.refresh()  # notice topics deleted or grown through other workers
        if self.topics.generation != self._configs_generation:
            self._configs_generation = self.topics.generation
            self._apply_topic_configs()
        self.logs.tick(now_ms())

    def _apply_topic_configs(self) -> None:
        """Topic settings changed through any worker (AlterConfigs) reach the open logs."""
        for (topic, _partition), partition_log in self.logs.logs().items():
            wanted = self.topics.config_for(topic)
            if partition_log.config != wanted:
                partition_log.config = wanted


def _as_v2(records):
    """Produce v0-v2 carry legacy message sets; the log holds only v2 batches."""
    if records is None or len(records) < 17 or records[16] == 2:
        return records if isinstance(records, (bytearray, memoryview)) else bytearray(records or b"")
    converted = decode_message_set(bytes(records))
    # the first message's codec (a compressed set is one wrapper message): Kafka
    # keeps what the producer chose when it converts to the v2 format
    codec = records[17] & layout.LEGACY_COMPRESSION_MASK
    return bytearray(encode_batch(converted, base_offset=converted[0].offset if converted else 0, compression=codec))
