"""ListOffsets (2): earliest (-2), latest (-1; for read_committed the last
stable offset), max timestamp (-3), earliest local (-4), latest tiered (-5,
= latest here) or the first offset at or after a timestamp.  Earliest and
latest of a standalone partition, or of a leader within its worker's lease,
come from the shared partition table its owner keeps current; everything
else (a timestamp to look up in the index, a partition the table cannot
answer for) is answered by the partition's owner.  The answer is written
without kio objects (``protocol/list_offsets_response.py``)."""

from hpbroker.errors import ErrorCode
from hpbroker.protocol import list_offsets_response
from hpbroker.security.acls import Operation
from hpbroker.sentinels import EARLIEST, EARLIEST_LOCAL, LATEST, LATEST_TIERED
from hpbroker.shared.partition_table import PartitionOffsets
from hpbroker.workers.handlers.per_partition import ask_each, by_topic, denied_topics
from hpbroker.workers.owner_calls import ListedOffset, ListOffset

API_KEY = 2


def published(offsets: PartitionOffsets, timestamp: int, current_leader_epoch: int,
              read_committed: bool = False) -> ListedOffset | None:
    """The answer the owner would give, from what it published; None: ask it.
    A replicated leader's entry counts only within its owner's lease
    (``serving``: see ``shared/partition_table.py``)."""
    if not offsets.answers_for(current_leader_epoch):
        return None
    if timestamp in (LATEST, LATEST_TIERED):
        latest = offsets.last_stable if read_committed else offsets.high_watermark
        return ListedOffset(ErrorCode.none, latest, -1, offsets.leader_epoch)
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        return ListedOffset(ErrorCode.none, offsets.log_start, -1, offsets.leader_epoch)
    return None


async def handle(ctx, header, request):
    read_committed = getattr(request, "isolation_level", 0) == 1  # v2+: latest is the last stable offset
    work = [(t.name, p.partition_index, p.timestamp, getattr(p, "current_leader_epoch", -1), read_committed)
            for t in request.topics for p in t.partitions]
    results = await ask_each(ctx, work, ListOffset, published=published,
                             denied=denied_topics(ctx, Operation.DESCRIBE, work))
    return [list_offsets_response.encode(header.correlation_id, header.api_version, [
        (topic, [(partition, r.error, r.timestamp, r.offset, r.leader_epoch) for (_, partition, *_), r in rows])
        for topic, rows in by_topic(work, results)])]
