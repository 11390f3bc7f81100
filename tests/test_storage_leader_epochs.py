"""The leader epoch cache (Kafka's LeaderEpochFileCache) and its checkpoint file."""

import os

import pytest

from hpbroker.storage import leader_epochs
from hpbroker.storage.checkpoints import CheckpointError
from hpbroker.storage.leader_epochs import LeaderEpochCache


def test_only_a_newer_epoch_is_recorded_at_its_first_batch():
    cache = LeaderEpochCache()
    assert cache.latest_epoch == -1
    assert cache.assign([(-1, 0)]) is False  # a batch from before epochs
    assert cache.assign([(0, 0), (0, 3), (2, 5), (1, 7), (2, 9)]) is True
    assert cache.entries == [(0, 0), (2, 5)]
    assert cache.assign([(2, 12)]) is False
    assert cache.latest_epoch == 2 and len(cache) == 2


def test_entries_is_a_copy():
    cache = LeaderEpochCache([(1, 0)])
    cache.entries.append((9, 9))
    assert cache.entries == [(1, 0)]


def test_truncating_from_the_end_forgets_epochs_starting_at_or_after_it():
    cache = LeaderEpochCache([(0, 0), (2, 5), (4, 9)])
    assert cache.truncate_from_end(20) is False
    assert cache.truncate_from_end(9) is True
    assert cache.entries == [(0, 0), (2, 5)]
    assert cache.truncate_from_end(1) is True
    assert cache.entries == [(0, 0)]
    assert cache.truncate_from_end(0) is True
    assert cache.entries == []


@pytest.mark.parametrize("requested, current, expected", [
    (-1, 4, (-1, -1)),  # undefined
    (4, 4, (4, 20)),  # the latest epoch ends at the log end
    (2, 4, (2, 9)),  # a known epoch ends where the next starts
    (3, 4, (2, 9)),  # an unknown one between: the one before it, ended by the next
    (0, 4, (0, 5)),
    (5, 4, (-1, -1)),  # newer than any known
    (4, 6, (4, 20)),  # the leader's current epoch holds from the log end on ...
    (6, 6, (6, 20)),
    (5, 6, (4, 20)),  # ... so the epoch before it ends there
])
def test_end_offset_for_an_epoch(requested, current, expected):
    cache = LeaderEpochCache([(0, 0), (2, 5), (4, 9)])
    assert cache.end_offset_for(requested, current, log_end=20) == expected


def test_an_epoch_older_than_every_known_one_ends_where_the_first_known_starts():
    cache = LeaderEpochCache([(3, 10), (5, 15)])
    assert cache.end_offset_for(1, -1, log_end=20) == (1, 10)


def test_an_empty_cache_knows_only_the_current_epoch():
    cache = LeaderEpochCache()
    assert cache.end_offset_for(0, -1, log_end=7) == (-1, -1)
    assert cache.end_offset_for(2, 2, log_end=7) == (2, 7)
    assert cache.end_offset_for(1, 2, log_end=7) == (1, 7)


def test_the_file_is_kafkas_checkpoint_and_reads_back(tmp_path):
    path = str(tmp_path / "leader-epoch-checkpoint")
    leader_epochs.write(path, LeaderEpochCache([(0, 0), (2, 5)]))
    with open(path) as f:
        assert f.read() == "0\n2\n0 0\n2 5\n"
    assert os.listdir(tmp_path) == ["leader-epoch-checkpoint"]  # the temp file was renamed
    assert leader_epochs.read(path).entries == [(0, 0), (2, 5)]


def test_a_missing_file_is_an_empty_cache(tmp_path):
    assert leader_epochs.read(str(tmp_path / "leader-epoch-checkpoint")).entries == []


@pytest.mark.parametrize("text", ["1\n1\n0 0\n", "0\n2\n0 0\n", "0\n1\n0 x\n", "0\n1\n0 0 0\n", "0\n"])
def test_a_malformed_file_is_refused(tmp_path, text):
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(text)
    with pytest.raises(CheckpointError):
        leader_epochs.read(str(path))
