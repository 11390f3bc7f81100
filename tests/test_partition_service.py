"""The owning worker's partition service, in process: appends, reads and the
OffsetForLeaderEpoch answer, over a real log directory."""

import asyncio

import pytest

from hpbroker.errors import FENCED_LEADER_EPOCH, NONE, UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION
from hpbroker.kernels import layout
from hpbroker.records import Record, encode_message_set, iter_batches
from hpbroker.storage import LogConfig, LogManager
from hpbroker.workers.partitions import PartitionService
from hpbroker.workers.topics import TopicRegistry


@pytest.fixture
def service(tmp_path):
    dirs = [str(tmp_path)]
    topics = TopicRegistry(dirs, LogConfig())
    logs = LogManager(dirs, LogConfig()).open()
    topics.create("t", 1)
    yield PartitionService(logs, topics)
    logs.close()


@pytest.mark.parametrize("codec", [layout.CODEC_NONE, layout.CODEC_GZIP, layout.CODEC_SNAPPY, layout.CODEC_LZ4])
@pytest.mark.parametrize("magic", [0, 1])
def test_a_legacy_message_set_is_stored_as_v2_in_the_producers_codec(service, codec, magic):
    records = [Record(i, 1_700_000_000_000 + i, b"k%d" % i, b"v%d" % i) for i in range(3)]
    error, base, *_ = service.append("t", 0, encode_message_set(records, magic=magic, compression=codec))
    assert (error, base) == (NONE, 0)
    [batch] = list(iter_batches(service.logs.get_log("t", 0).read_records(0)))
    assert batch.header.compression == codec
    assert [(r.offset, r.key, r.value) for r in batch.records] == [(r.offset, r.key, r.value) for r in records]


def test_offset_for_leader_epoch_through_the_service(service):
    service.append("t", 0, encode_message_set([Record(0, 0, None, b"x")], magic=1))
    assert service.end_offset_for_epoch("t", 0, 0) == (NONE, 0, 1)
    assert service.end_offset_for_epoch("t", 0, 0, current_leader_epoch=1) == (UNKNOWN_LEADER_EPOCH, -1, -1)
    service.leader_epoch = 2
    assert service.end_offset_for_epoch("t", 0, 0, current_leader_epoch=1) == (FENCED_LEADER_EPOCH, -1, -1)
    assert service.end_offset_for_epoch("t", 0, 2, current_leader_epoch=2) == (NONE, 2, 1)


def test_answers_are_named_and_a_batch_runs_only_partition_methods(service):
    appended = service.append("t", 0, encode_message_set([Record(0, 0, None, b"x")], magic=1))
    assert (appended.error, appended.base_offset, appended.log_start_offset) == (NONE, 0, 0)
    [located, missing] = asyncio.run(service.batch("locate", [("t", 0, 0, 1 << 20), ("t", 5, 0, 1 << 20)]))
    assert (located.error, located.high_watermark, located.position) == (NONE, 1, 0) and located.size > 0
    assert missing.error == UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(ValueError, match="not a partition method"):
        asyncio.run(service.batch("partition_log", [("t", 0)]))
