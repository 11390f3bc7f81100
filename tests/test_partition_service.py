"""The owning worker's partitions, in process: the registry, appends, reads, the
OffsetForLeaderEpoch answer and the delayed operations, over a real log
directory (standalone: every partition leads, at epoch 0)."""

import asyncio

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.kernels import layout
from hpbroker.records import Record, encode_batch, encode_message_set, iter_batches
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.owner_calls import (
    Append,
    Batch,
    DeletePartition,
    EpochEnd,
    EpochEndOffset,
    Locate,
    PartitionBounds,
    WaitForData,
    WaitReplicated,
)
from hpbroker.workers.partition import Role
from hpbroker.workers.partitions import Partitions
from hpbroker.workers.topics import TopicRegistry


@pytest.fixture
def partitions(tmp_path):
    dirs = [str(tmp_path)]
    topics = TopicRegistry(dirs, LogConfig())
    logs = LogManager(dirs, LogConfig()).open()
    asyncio.run(topics.create("t", 1))
    yield Partitions(logs, topics)
    logs.close()


def batch(value: bytes = b"x") -> bytearray:
    return bytearray(encode_batch([Record(0, 0, None, value)]))


@pytest.mark.parametrize("codec", [layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_message_set_is_stored_as_v2_in_the_producers_codec(partitions, codec, magic):
    records = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    appended = partitions.append(Append("t", 0, encode_message_set(records, magic=magic, compression=codec)))
    assert (appended.error, appended.base_offset) == (ErrorCode.none, 0)
    [stored] = list(iter_batches(partitions.log_of("t", 0).read_records(0)))
    assert stored.header.compression == codec
    assert [(r.offset, r.key, r.value) for r in stored.records] == [(r.offset, r.key, r.value) for r in records]


def test_offset_for_leader_epoch_and_the_epoch_guard(partitions):
    partitions.append(Append("t", 0, batch()))
    assert partitions.epoch_end(EpochEnd("t", 0, 0)) == EpochEndOffset(ErrorCode.none, 0, 1)
    assert partitions.epoch_end(EpochEnd("t", 0, 0, current_leader_epoch=1)).error == ErrorCode.unknown_leader_epoch
    partitions.resolve("t", 0).leader_epoch = 2
    assert partitions.epoch_end(EpochEnd("t", 0, 0, current_leader_epoch=1)).error == ErrorCode.fenced_leader_epoch
    assert partitions.epoch_end(EpochEnd("t", 0, 2, current_leader_epoch=2)) == EpochEndOffset(ErrorCode.none, 2, 1)


def test_resolve_is_the_one_guard_every_call_goes_through(partitions):
    found = partitions.resolve("t", 0)
    assert found.role is Role.STANDALONE and found.leads() and partitions.resolve("t", 0) is found
    assert partitions.resolve("t", 5) == ErrorCode.unknown_topic_or_partition
    assert partitions.resolve("nope", 0) == ErrorCode.unknown_topic_or_partition
    for call in (Append("t", 5, batch()), Locate("t", 5, 0, 100), PartitionBounds("t", 5), EpochEnd("t", 5, 0)):
        handler = partitions.handlers()[type(call)]
        assert handler(call).error == ErrorCode.unknown_topic_or_partition, call


def test_a_batch_answers_each_call_in_its_order(partitions):
    appended = partitions.append(Append("t", 0, encode_message_set([Record(0, 0, None, b"x")], magic=1)))
    assert (appended.error, appended.base_offset, appended.log_start_offset) == (ErrorCode.none, 0, 0)
    located, missing, bounds = asyncio.run(partitions.batch(Batch(
        [Locate("t", 0, 0, 1 << 20), Locate("t", 5, 0, 1 << 20), PartitionBounds("t", 0)]))).results
    assert (located.error, located.high_watermark, located.position) == (ErrorCode.none, 1, 0) and located.size > 0
    assert missing.error == ErrorCode.unknown_topic_or_partition
    assert (bounds.log_start_offset, bounds.high_watermark) == (0, 1)


def test_a_long_poll_waits_in_the_purgatory_until_an_append_pokes_it(partitions):
    async def scenario():
        partitions.append(Append("t", 0, batch()))
        assert (await partitions.wait_for_data(WaitForData([("t", 0, 0)], 5000))).ready  # data already there
        assert not (await partitions.wait_for_data(WaitForData([("t", 0, 1)], 10))).ready  # nothing beyond: times out
        waiting = asyncio.ensure_future(partitions.wait_for_data(WaitForData([("t", 0, 1)], 5000)))
        await asyncio.sleep(0)
        assert not waiting.done() and partitions.purgatory.watched(("t", 0)) == 1
        partitions.append(Append("t", 0, batch()))
        assert (await asyncio.wait_for(waiting, 5)).ready
        assert partitions.purgatory.watched(("t", 0)) == 0
        # standalone, acks=all is answered at once: the one replica has it
        assert (await partitions.wait_replicated(WaitReplicated([("t", 0, 2)], 5000))).errors == [ErrorCode.none]
    asyncio.run(scenario())


def test_a_deleted_partition_ends_the_waits_on_it(partitions):
    async def scenario():
        waiting = asyncio.ensure_future(partitions.wait_for_data(WaitForData([("t", 0, 0)], 5000)))
        await asyncio.sleep(0)
        assert partitions.delete_partition(DeletePartition("t", 0)).error == ErrorCode.none
        assert (await asyncio.wait_for(waiting, 5)).ready  # looks again, and finds the partition gone
    asyncio.run(scenario())
