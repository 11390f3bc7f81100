"""What the owner of partitions tells the other workers without being asked:
each partition's role and offsets, in the broker's shared partition table
(``hpbroker.shared.partition_table``), rewritten whenever they move.

``Publisher`` writes this worker's region of the table; ``UNPUBLISHED`` is the
same interface writing nothing (tests and tools that hold a log without a
broker around it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hpbroker.shared.partition_table import LEADER, ROLE_CODES, STANDALONE, TableWriter

if TYPE_CHECKING:
    from hpbroker.workers.partition import Partition


class Publisher:
    def __init__(self, writer: TableWriter):
        self.writer = writer
        writer.reset()  # whatever an earlier incarnation of this worker left, torn or not

    def publish(self, partition: Partition) -> None:
        log = partition.log
        high_watermark = log.high_watermark
        role = ROLE_CODES[partition.role.value]
        batches = None
        if role == STANDALONE or role == LEADER:  # the roles whose fetches other workers answer from the table
            segment = log.active_segment
            batches = (segment.base_offset, segment.identity, segment.recent_generation, segment.recent)
        self.writer.publish(partition.topic, partition.index, role, partition.leads(), partition.leader_epoch,
                            log.log_start_offset, high_watermark, log.log_end_offset, log.last_stable_offset,
                            batches, has_aborts=log.has_aborted_transactions)

    def withdraw(self, topic: str, index: int) -> None:
        self.writer.withdraw(topic, index)

    def grant_lease(self, until_s: float) -> None:
        """This worker's leaderships may be trusted until then (``time.monotonic()``)."""
        self.writer.grant_lease(until_s)

    def revoke_lease(self) -> None:
        self.writer.revoke_lease()


class _Unpublished:
    def publish(self, partition: Partition) -> None:
        pass

    def withdraw(self, topic: str, index: int) -> None:
        pass

    def grant_lease(self, until_s: float) -> None:
        pass

    def revoke_lease(self) -> None:
        pass


UNPUBLISHED = _Unpublished()
