"""Produce (0): each partition's batches go to its owning worker, which appends
them (single writer); the answers come back in the client's order, written
straight to the wire (``protocol/produce_response.py``).  An acks=all answer
that must wait for the replicas is owed (``Later``): the connection handles
the producer's next request meanwhile.  So is an acks=1 answer whose
``flush.messages`` fsync is still to come: the owner does one fsync per
partition for all the produces of a turn of its loop (a group commit, see
``Partitions.group_flushes_on``).

A transactional batch that would open its producer's transaction on a
partition is held by the owner until the transaction coordinator confirms
the partition was added to the ongoing transaction (KIP-890 part 1): then a
produce delayed past its transaction's end cannot open a new one that nobody
will ever end."""

import logging
import struct

from hpbroker.errors import ErrorCode
from hpbroker.kernels import layout
from hpbroker.protocol import produce_response
from hpbroker.records.batch import first_is_transactional, first_producer
from hpbroker.security.acls import Operation
from hpbroker.workers import eager
from hpbroker.workers.context import CloseConnection, Later
from hpbroker.workers.handlers.per_partition import ask_each, denied_topics
from hpbroker.workers.owner_calls import AddTxnPartitions, Append, AppendResult, WaitReplicated
from hpbroker.workers.transactions import markers

API_KEY = 0
log = logging.getLogger(__name__)
_VALID_ACKS = (-1, 0, 1)
_COORDINATOR_AWAY = (ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
                     ErrorCode.coordinator_load_in_progress, ErrorCode.concurrent_transactions)
_INT32 = struct.Struct(">i")
_NO_RECORDS = AppendResult(ErrorCode.corrupt_message, message="no records")
_DENIED = AppendResult(ErrorCode.topic_authorization_failed, message="WRITE on this topic is not allowed")


def _refused(version: int, records) -> AppendResult | None:
    """What Kafka refuses of one partition's records before appending
    anything (its ``ProduceRequest.validateRecords``): from v3 a second
    whole batch (INVALID_RECORD: one batch per partition, so its header
    speaks for all of it, the transactional bit included), and zstd before
    v7 (UNSUPPORTED_COMPRESSION_TYPE), and from v3 a legacy message set
    (INVALID_RECORD: those versions carry record batches only; at v0-v2 the
    owner converts one).  Torn bytes are the log's to refuse (CORRUPT_MESSAGE)."""
    if records is None:
        return _NO_RECORDS
    if version < 3 or len(records) <= layout.ATTRIBUTES_LOW:
        return None
    magic = records[layout.MAGIC]
    if magic in (0, 1):
        return AppendResult(ErrorCode.invalid_record,
                            message=f"produce v{version} carries record batches (magic 2), not a magic {magic} "
                                    "message set")
    if magic != 2:
        return None
    if version < 7 and records[layout.ATTRIBUTES_LOW] & layout.COMPRESSION_MASK == layout.CODEC_ZSTD:
        return AppendResult(ErrorCode.unsupported_compression_type,
                            message=f"zstd batches need produce v7 or later, not v{version}")
    end = _INT32.unpack_from(records, layout.BATCH_LENGTH)[0] + layout.LOG_OVERHEAD
    rest = len(records) - end
    if end >= layout.BATCH_HEADER_SIZE and rest >= layout.LOG_OVERHEAD and (
            _INT32.unpack_from(records, end + layout.BATCH_LENGTH)[0] + layout.LOG_OVERHEAD <= rest):
        return AppendResult(ErrorCode.invalid_record,
                            message=f"produce v{version} allows one record batch per partition; this has more")
    return None


async def _append_all(ctx, work, acks: int, transactional_id: str | None, version: int,
                      denied: frozenset[str] = frozenset()) -> list:
    """Append each partition's batches through its owner, one call per owner
    (the owner checks leadership and, for acks=all, min.insync.replicas),
    but for the partitions ``_refused`` answers already and those of the
    topics the producer may not write (``denied``)."""
    def append(topic: str, partition: int, records) -> Append:
        return Append(topic, partition, records, acks)

    refused = [_DENIED if topic in denied else _refused(version, records) for topic, _, records in work]
    if refused.count(None) == len(work):  # the usual request
        results = await ask_each(ctx, work, append)
    else:
        results: list = list(refused)  # the Nones are filled in by the owners' answers
        sent = [i for i, result in enumerate(refused) if result is None]
        for i, answer in zip(sent, await ask_each(ctx, [work[i] for i in sent], append)):
            results[i] = answer
    for result in results:
        if result.verify:
            await _verified(ctx, work, results, acks, transactional_id)
            break
    return results


async def _verified(ctx, work, results, acks: int, transactional_id: str | None) -> None:
    """KIP-890: the partitions whose owner holds a transactional batch until the
    coordinator confirms the partition is in the producer's ongoing
    transaction are asked about in one call, and appended again under the
    guard they were given; the others answer the coordinator's error."""
    waiting = [i for i, r in enumerate(results) if r.verify]
    producer = first_producer(work[waiting[0]][2])
    assert producer is not None  # its owner read it to hand out the guard
    producer_id, epoch = producer
    assert transactional_id is not None  # handle() refuses transactional records without one
    verdict = await markers.verify(ctx, AddTxnPartitions(transactional_id, producer_id, epoch,
                                                         [(work[i][0], work[i][1]) for i in waiting],
                                                         verify_only=True))
    errors = {(p.topic, p.partition): p.error for p in verdict.partitions}
    retry = []
    for i in waiting:
        error = errors.get((work[i][0], work[i][1]), verdict.error)
        # the coordinator away or busy is retriable: a producer retries NOT_ENOUGH_REPLICAS, as Kafka answers
        error = ErrorCode.not_enough_replicas if error in _COORDINATOR_AWAY else error
        # a fenced producer's produce is told INVALID_PRODUCER_EPOCH, as Kafka answers it: clients abort on
        # it and meet the fatal PRODUCER_FENCED at EndTxn (librdkafka takes a produce's PRODUCER_FENCED for
        # abortable, aiokafka does not know it)
        error = ErrorCode.invalid_producer_epoch if error == ErrorCode.producer_fenced else error
        if error == ErrorCode.none:
            retry.append(i)
        else:
            results[i] = AppendResult(error, message=f"the coordinator of {transactional_id!r} does not have "
                                                     f"this partition in an ongoing transaction")
    answers = await ctx.owners.ask_all([Append(work[i][0], work[i][1], work[i][2], acks, verified=results[i].verify)
                                        for i in retry])
    for i, answer in zip(retry, answers):
        results[i] = answer


def _waits(acks: int, result: AppendResult) -> bool:
    """Whether an appended batch's answer must wait: acks=all until the high
    watermark passed it, acks=1 until its group commit's fsync did."""
    if result.error != ErrorCode.none:
        return False
    return not result.replicated if acks == -1 else acks == 1 and not result.durable


async def _wait_replicated(ctx, work, results, timeout_s: float, acks: int) -> list:
    """Each appended batch that ``_waits`` is answered once its wait is over
    (one wait per owning worker); a failure replaces its success."""
    by_owner: dict[int, list[int]] = {}
    for i, ((topic, partition, _), result) in enumerate(zip(work, results)):
        if _waits(acks, result):
            by_owner.setdefault(ctx.owners.partition_owner(topic, partition), []).append(i)

    async def one(owner: int, indexes: list[int]) -> None:
        wanted = [(work[i][0], work[i][1], results[i].end_offset) for i in indexes]
        replicated = await ctx.owners.ask(WaitReplicated(wanted, int(timeout_s * 1000), durable_only=acks == 1),
                                          owner)
        for i, error in zip(indexes, replicated.errors):
            if error != ErrorCode.none:
                results[i] = AppendResult(error, log_start_offset=results[i].log_start_offset)

    await eager.all_of([one(owner, indexes) for owner, indexes in by_owner.items()])
    return results


async def handle(ctx, header, request):
    acks = request.acks
    work = [(t.name, p.index, p.records) for t in request.topic_data for p in t.partition_data]
    transactional_id = getattr(request, "transactional_id", None)
    if acks not in _VALID_ACKS:
        results = [AppendResult(ErrorCode.invalid_required_acks)] * len(work)
    elif transactional_id is None and any(first_is_transactional(records) for _, _, records in work):
        # Kafka's answer to transactional records from no transactional id, for the whole request
        results = [AppendResult(ErrorCode.transactional_id_authorization_failed,
                                message="transactional records in a produce request without a transactional id")
                   ] * len(work)
    elif transactional_id is not None and not ctx.access.transactional_id(Operation.WRITE, transactional_id):
        results = [AppendResult(ErrorCode.transactional_id_authorization_failed,
                                message=f"WRITE on transactional id {transactional_id!r} is not allowed")] * len(work)
    else:
        results = await _append_all(ctx, work, acks, transactional_id, header.api_version,
                                    denied_topics(ctx, Operation.WRITE, work))
        if any(_waits(acks, r) for r in results):
            # appended: the next request may be handled while this one waits for the replicas
            # (or its group commit's fsync). The wait keeps where the records went, not the
            # records: the request's buffer serves another request meanwhile (protocol/framing.py).
            placed = [(topic, partition, None) for topic, partition, _ in work]
            return Later(_answer_replicated(ctx, header, placed, results, request.timeout.total_seconds(), acks),
                         request.without_records())
    if acks == 0:
        # No response exists; a failure closes the connection, as Kafka does,
        # so the client notices (it reconnects and refreshes its metadata).
        failed = [f"{topic}-{partition}: {ErrorCode(result.error).name}"
                  for (topic, partition, _), result in zip(work, results) if result.error != ErrorCode.none]
        if failed:
            raise CloseConnection(f"an acks=0 produce failed ({', '.join(failed[:3])}"
                                  f"{', ...' if len(failed) > 3 else ''})")
        return None
    return _answer(header, work, results)


async def _answer_replicated(ctx, header, work, results, timeout_s: float, acks: int) -> list[bytes]:
    return _answer(header, work, await _wait_replicated(ctx, work, results, timeout_s, acks))


def _answer(header, work, results) -> list[bytes]:
    by_topic: dict[str, list] = {}
    for (topic, partition, _), result in zip(work, results):
        by_topic.setdefault(topic, []).append((partition, result.error, result.base_offset, result.log_append_time,
                                               result.log_start_offset, result.message))
    return [produce_response.encode(header.correlation_id, header.api_version, list(by_topic.items()))]
