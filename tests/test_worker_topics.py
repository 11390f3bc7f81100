"""The topic registry as two workers see it: created through one, seen by the other."""

import asyncio
import os

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import partition_owner
from hpbroker.storage import LogConfig, filenames
from hpbroker.storage.checkpoints import read_partition_metadata
from hpbroker.workers.producer_ids import BLOCK_SIZE, ProducerIdAllocator
from hpbroker.workers.topics import TopicError, TopicRegistry


@pytest.fixture
def two_workers(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    for d in dirs:
        os.makedirs(d)
    return TopicRegistry(dirs, LogConfig()), TopicRegistry(dirs, LogConfig())


def test_a_topic_created_by_one_worker_is_seen_by_the_other(two_workers):
    one, other = two_workers
    created = asyncio.run(one.create("events", 3, {"retention.ms": "1000"}))
    seen = other.get("events")
    assert seen is not None and (seen.topic_id, seen.partitions) == (created.topic_id, 3)
    assert seen.configs == {"retention.ms": "1000"}
    assert other.by_id(created.topic_id).name == "events"
    for p in range(3):
        found = [d for d in one.log_dirs if os.path.isdir(os.path.join(d, filenames.partition_dir_name("events", p)))]
        assert len(found) == 1
        assert read_partition_metadata(os.path.join(found[0], f"events-{p}", "partition.metadata")) == created.topic_id
    asyncio.run(one.add_partitions("events", 5))
    assert other.get("events", 4).partitions == 5  # asking for a new partition rereads the directories


@pytest.mark.parametrize("name, partitions, configs, code", [
    ("bad name!", 1, {}, ErrorCode.invalid_topic_exception),
    ("..", 1, {}, ErrorCode.invalid_topic_exception),
    ("x" * 250, 1, {}, ErrorCode.invalid_topic_exception),
    ("ok", 0, {}, ErrorCode.invalid_partitions),
    ("ok", 1, {"retention.mss": "1"}, ErrorCode.invalid_config),
])
def test_invalid_creations_carry_kafkas_codes(two_workers, name, partitions, configs, code):
    with pytest.raises(TopicError) as raised:
        asyncio.run(two_workers[0].create(name, partitions, configs))
    assert raised.value.code == code


def test_duplicates_and_dot_underscore_collisions(two_workers):
    one, other = two_workers
    asyncio.run(one.create("a.b", 1))
    for name in ("a.b", "a_b"):
        with pytest.raises(TopicError) as raised:
            asyncio.run(other.create(name, 1))
        assert raised.value.code in (ErrorCode.topic_already_exists, ErrorCode.invalid_topic_exception)
    with pytest.raises(TopicError) as raised:
        asyncio.run(one.add_partitions("a.b", 1))
    assert raised.value.code == ErrorCode.invalid_partitions


def test_validate_only_creates_nothing(two_workers):
    one, other = two_workers
    asyncio.run(one.create("dry", 2, validate_only=True))
    assert other.get("dry") is None


def test_ownership_is_stable_and_spreads_a_topic():
    owners = {partition_owner("events", p, 2) for p in range(4)}
    assert owners == {0, 1}
    assert partition_owner("events", 3, 2) == partition_owner("events", 3, 2)


def test_producer_ids_are_unique_across_workers_and_restarts(tmp_path):
    first, second = ProducerIdAllocator(str(tmp_path)), ProducerIdAllocator(str(tmp_path))
    ids = [asyncio.run(first.allocate()), asyncio.run(second.allocate()), asyncio.run(first.allocate())]
    restarted = ProducerIdAllocator(str(tmp_path))
    ids.append(asyncio.run(restarted.allocate()))
    assert len(set(ids)) == len(ids)
    assert ids[1] == BLOCK_SIZE and ids[3] == 2 * BLOCK_SIZE


def test_segment_descriptors_follow_a_file_replaced_under_the_same_name(tmp_path):
    from hpbroker.workers.context import SegmentFiles

    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"old segment")
    files = SegmentFiles()
    first = files.fd(str(path))
    assert first is not None
    assert os.pread(first, 3, 0) == b"old"
    old_identity = (os.fstat(first).st_dev, os.fstat(first).st_ino)
    # compaction swaps a cleaned segment in under the same name
    replacement = tmp_path / "00000000000000000000.log.swap"
    replacement.write_bytes(b"new segment")
    os.replace(replacement, path)
    reopened = files.fd(str(path))
    assert reopened is not None
    assert os.pread(reopened, 3, 0) == b"new"
    # positions computed on the old file must not be read from the new one
    assert files.fd(str(path), old_identity) is None
    # retention renames a segment to .deleted while readers may still ask for it
    os.rename(path, str(path) + ".deleted")
    still_open = files.fd(str(path))
    assert still_open is not None
    assert os.pread(still_open, 3, 0) == b"new"
    os.unlink(str(path) + ".deleted")
    assert files.fd(str(path)) is None
    files.close()
