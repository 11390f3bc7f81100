"""Fetch (1): records straight from the segment files with sendfile (a few
kilobytes are read into the answer instead: see ``_records``).

Each partition's owner says where the batches are (path, position, size) up to
its high watermark; this worker, which holds the client's socket, sends them.
Limits as Kafka applies them: ``partition_max_bytes`` per partition,
``max_bytes`` for the response (the first non-empty partition always gets at
least one whole batch, KIP-74), and a long poll: when fewer than ``min_bytes``
are ready the request waits, up to ``max_wait``, for any partition to grow.
Fetch sessions are answered as full fetches (session id 0, KIP-227 allows it).
"""

import asyncio
import logging
import os
import time

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.storage.recent_batches import whole_batches
from hpbroker.workers import affinity, observe
from hpbroker.workers.fetch_response import FileRegion, PartitionResult, TopicResult, encode_fetch_response
from hpbroker.workers.owner_calls import FollowerFetch, Locate, LocateResult, WaitForData

API_KEY = 1
log = logging.getLogger(__name__)
_UNKNOWN_PARTITION = LocateResult(ErrorCode.unknown_topic_or_partition)
SMALL_RECORDS_BYTES = 32 << 10  # up to this, records are read into the answer rather than sent with sendfile


def published_locate(ctx, topic: str, partition: int, offset: int, max_bytes: int,
                     current_leader_epoch: int, read_committed: bool = False) -> LocateResult | None:
    """A consumer's ``Locate`` answered as the owner would, from what it
    published (``shared/partition_table.py``): its offsets and the places of its
    recent batches (a replicated leader's within its owner's lease); None when
    they do not say (an offset out of range or older than the recent batches,
    an entry being rewritten, a lease run out, a read_committed fetch of a log
    with aborted transactions in it): ask the owner."""
    table = ctx.partition_offsets
    found = table.read_with_batches(topic, partition) if table is not None else None
    if found is None:
        return None
    offsets, recent = found
    if not offsets.answers_for(current_leader_epoch):
        return None
    if read_committed and offsets.has_aborts:
        return None  # which of them the range holds is in the owner's transaction indexes
    hw, lso, start = offsets.high_watermark, offsets.last_stable, offsets.log_start
    limit = lso if read_committed else hw
    aborted = [] if read_committed else None
    if offset < start or offset > hw:
        return None
    if offset >= limit:
        return LocateResult(ErrorCode.none, hw, lso, start, aborted=aborted)  # nothing yet
    if recent is None:
        return None
    # as Log.read: whole batches below the limit, at most max_bytes, at least one
    found = whole_batches(recent.batches, offset, max_bytes, limit, True)
    if not isinstance(found, tuple):
        return None  # (NOT_COVERED) older than the recent batches: the owner's index knows
    position, size = found
    path = ctx.partition_dirs.segment_path(topic, partition, recent.segment_base)
    if path is None:
        return None
    if ctx.segment_files.fd(path, recent.identity) is None:  # not that file (any more): the owner knows
        ctx.partition_dirs.forget(topic, partition)
        return None
    return LocateResult(ErrorCode.none, hw, lso, start, path, position, size, recent.identity, aborted)


async def _locate_all(ctx, wanted, max_bytes: int, replica, read_committed: bool = False) -> list:
    """Where each requested partition's batches are: one call per owning worker,
    none larger than the whole response may be (``max_bytes``) unless its first
    batch alone is.  None for a partition of an unknown topic (its error is the
    topic's).  A follower's fetch (``replica``: its id and broker epoch) is a
    ``FollowerFetch``, which also tells the leader how far the follower got."""
    results, calls, slots = [], [], []
    for _, info, _, parts in wanted:
        for p in parts:
            if info is not None and p.partition >= info.partitions:
                info = ctx.topics.get(info.name, p.partition) or info  # grown through another worker?
            if info is None:
                results.append(None)
            elif not 0 <= p.partition < info.partitions:
                results.append(_UNKNOWN_PARTITION)
            else:
                slots.append(len(results))
                results.append(None)
                size = min(p.partition_max_bytes, max_bytes)
                epoch = getattr(p, "current_leader_epoch", -1)
                if replica is None:
                    answer = published_locate(ctx, info.name, p.partition, p.fetch_offset, size, epoch,
                                              read_committed)
                    if answer is not None:
                        results[-1] = answer
                        slots.pop()
                        continue
                    calls.append(Locate(info.name, p.partition, p.fetch_offset, size, epoch, read_committed))
                else:
                    replica_id, replica_epoch = replica
                    calls.append(FollowerFetch(info.name, p.partition, p.fetch_offset, size, epoch, replica_id,
                                               replica_epoch, getattr(p, "log_start_offset", -1)))
    for slot, answer in zip(slots, await ctx.owners.ask_all(calls) if calls else ()):
        results[slot] = answer
    return results


def _records(fd: int, position: int, size: int):
    """A partition's records for the response: a few kilobytes are read into it
    (one pread, and the answer goes out in one write); more are a FileRegion,
    sent from the page cache with sendfile.  For a tailing consumer's or a
    follower's batch or two, sendfile cost more than the copy it saves: a
    descriptor duplicated and closed, and the answer split into three sends
    around it, each a wake-up on the other side."""
    if size <= SMALL_RECORDS_BYTES:
        data = os.pread(fd, size, position)
        # short only if the file was cut since it was located: nothing, and the
        # client asks again (a torn first batch would be an error to a consumer)
        return data if len(data) == size else b""
    # the response owns a duplicate: the cache may close its own before the send
    return FileRegion(os.dup(fd), position, size)


def _resolve(ctx, topic, version):
    if version >= 13:
        return ctx.topics.by_id(topic.topic_id), ErrorCode.unknown_topic_id
    return ctx.topics.get(topic.topic), ErrorCode.unknown_topic_or_partition


async def _wait_for_data(ctx, wanted, located, timeout_s, replica: bool):
    """Until any partition grows past the end the last look saw (one wait per
    owner) or time is up.  Waiting past the fetch offset instead would return at
    once whenever some data exists but less than ``min_bytes``: a busy loop."""
    by_owner: dict[int, list] = {}
    seen = iter(located)
    for _, info, _, parts in wanted:
        for p in parts:
            r = next(seen)
            if info is not None and r is not None:
                end_seen = max(p.fetch_offset, r.high_watermark)
                by_owner.setdefault(ctx.owners.partition_owner(info.name, p.partition), []).append(
                    (info.name, p.partition, end_seen))
    if not by_owner:
        await asyncio.sleep(timeout_s)  # nothing can arrive: Kafka too holds such a fetch for max_wait
        return
    affinity.saw(by_owner.keys())  # a long poll is a round trip to each owner: the connection may move there
    if len(by_owner) == 1 and ctx.owners.index in by_owner:
        # the usual long poll, on this worker's own partitions: the purgatory's
        # timer ends the wait, so no task and no second timer (another worker's
        # wait keeps one here: that worker may hang)
        here = ctx.owners.index
        await ctx.owners.ask(WaitForData(by_owner[here], int(timeout_s * 1000), replica), here)
        return
    waits = [asyncio.ensure_future(ctx.owners.ask(WaitForData(items, int(timeout_s * 1000), replica), owner))
             for owner, items in by_owner.items()]
    _done, pending = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    for wait in pending:
        wait.cancel()


async def handle(ctx, header, request):
    version = header.api_version
    max_bytes = request.max_bytes  # every advertised version (4+) has it
    deadline = time.monotonic() + request.max_wait.total_seconds()
    # a follower broker (replica id >= 0) reads to the log end; consumers to the high watermark.
    # From v15 the follower also names its broker epoch (which incarnation fetches).
    state = getattr(request, "replica_state", None)
    if state is not None:
        replica_id, replica_epoch = state.replica_id, state.replica_epoch
    else:
        replica_id, replica_epoch = getattr(request, "replica_id", -1), -1
    replica = (replica_id, replica_epoch) if replica_id >= 0 else None
    # READ_COMMITTED (1): up to the last stable offset, told which transactions were aborted
    read_committed = replica is None and request.isolation_level == 1
    wanted = []  # (topic request, info, unknown error, [partitions])
    # a follower needs CLUSTER_ACTION, a consumer READ on each topic (Kafka's checks)
    follower_denied = replica is not None and not ctx.access.cluster(Operation.CLUSTER_ACTION)
    for topic in request.topics:
        info, unknown = _resolve(ctx, topic, version)
        if ctx.access.enabled:
            name = info.name if info is not None else getattr(topic, "topic", None)
            if follower_denied or (replica is None and name is not None
                                   and not ctx.access.topic(Operation.READ, name)):
                info, unknown = None, ErrorCode.topic_authorization_failed
        wanted.append((topic, info, unknown, topic.partitions))
    while True:
        located = await _locate_all(ctx, wanted, max_bytes, replica, read_committed)
        ready = sum(r.size for r in located if r is not None and r.error == ErrorCode.none and r.path)
        errors = any(r is None or r.error != ErrorCode.none for r in located)
        remaining = deadline - time.monotonic()
        if ready >= request.min_bytes or errors or remaining <= 0 or not located:
            break
        await _wait_for_data(ctx, wanted, located, remaining, replica is not None)
        if time.monotonic() >= deadline:
            located = await _locate_all(ctx, wanted, max_bytes, replica, read_committed)
            break
    budget, first = max_bytes, True
    topics, results = [], iter(located)
    for topic, info, unknown, parts in wanted:
        # below v13 a topic is named, from v13 on identified: echo what the request carried
        out = TopicResult(info.name if info else getattr(topic, "topic", ""),
                          info.topic_id if info else getattr(topic, "topic_id", None))
        for p in parts:
            r = next(results)
            if r is None:
                out.partitions.append(PartitionResult(p.partition, unknown, records=b""))
                continue
            records = b""
            # the first partition with data is sent whole so a consumer always
            # progresses (KIP-74); the others only if they fit what is left
            if r.path is not None and r.size and (r.size <= budget or first):
                fd = ctx.segment_files.fd(r.path, r.identity)
                if fd is not None:  # else the segment was just replaced: the client fetches again
                    records = _records(fd, r.position, r.size)
                    budget -= r.size
                    first = False
                    observe.fetched(info.name, r.size)
            out.partitions.append(PartitionResult(p.partition, r.error, r.high_watermark, r.last_stable_offset,
                                                  r.log_start_offset,
                                                  aborted=(r.aborted or []) if read_committed else None,
                                                  records=records))
        topics.append(out)
    return encode_fetch_response(version, header.correlation_id, topics)
