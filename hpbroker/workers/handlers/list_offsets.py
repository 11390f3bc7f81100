"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest
local (-4), latest tiered (-5, = latest here) or the first offset at or after a
timestamp.  Earliest and latest of a standalone partition, or of a leader
within its worker's lease, come from the shared partition table its owner
keeps current; everything else (a timestamp to look up in the index, a
partition the table cannot answer for) is answered by the partition's owner."""

from hpbroker.errors import ErrorCode
from hpbroker.sentinels import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED
from hpbroker.shared.partition_table import PartitionOffsets
from hpbroker.workers.handlers.per_partition import ask_each, by_topic
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import ListedOffset, ListOffset

API_KEY = 2


def published(offsets: PartitionOffsets, timestamp: int, current_leader_epoch: int) -> ListedOffset | None:
    """The answer the owner would give, from what it published; None: ask it.
    A replicated leader's entry counts only within its owner's lease
    (``serving``: see ``shared/partition_table.py``)."""
    if not offsets.answers_for(current_leader_epoch):
        return None
    if timestamp in (LATEST, LATEST_TIERED):
        return ListedOffset(ErrorCode.none, offsets.high_watermark, -1, offsets.leader_epoch)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ListedOffset(ErrorCode.none, offsets.log_start, -1, offsets.leader_epoch)
    return None


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    work = [(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1))
            for t in request.topics for p in t.partitions]
    results = await ask_each(ctx, work, ListOffset, published=published)
    return make(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(
        make(m.ListOffsetsTopicResponse, name=topic, partitions=tuple(
            make(m.ListOffsetsPartitionResponse, partition_index=partition, error_code=r.error, timestamp=r.timestamp,
                 offset=r.offset, leader_epoch=r.leader_epoch, old_style_offsets=(r.offset,))
            for (_, partition, *_), r in rows))
        for topic, rows in by_topic(work, results)))
