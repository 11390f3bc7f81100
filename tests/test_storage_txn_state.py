"""A producer's transaction as a partition's log enforces it: a plain
(idempotent, not transactional) batch of a producer whose transaction is open
on the partition is refused with INVALID_TXN_STATE on both append paths, and
nothing is appended; the marker lifts that.  The broker's own transactional
writes (``ORIGIN_COORDINATOR``: offsets committed in a transaction) carry no
sequence: they are never taken for duplicates nor out of order, only an
older epoch is refused."""

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.kernels.layout import TRANSACTIONAL_BIT
from hpbroker.records import Record, encode_batch, encode_control_batch, iter_batches
from hpbroker.records.control import ABORT, COMMIT
from hpbroker.storage import InvalidProducerEpochError, InvalidRecordError, InvalidTxnStateError, Log, LogConfig
from hpbroker.storage.log import ORIGIN_COORDINATOR
from hpbroker.storage.producer_state import ProducerStateManager, Verdict

T0 = 1_700_000_000_000
PID = 4000


def open_log(tmp_path, **config) -> Log:
    return Log.open(str(tmp_path / "events-0"), "events", 0, LogConfig(**config))


def data(count: int = 2, *, pid: int = PID, epoch: int = 0, sequence: int = 0, transactional: bool = False,
         tag: str = "v") -> bytes:
    records = [Record(i, T0 + i, f"k{i}".encode(), f"{tag}{i}".encode()) for i in range(count)]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                        transactional=transactional)


def marker(kind: int, *, pid: int = PID, epoch: int = 0) -> bytes:
    return encode_control_batch(kind, producer_id=pid, producer_epoch=epoch, coordinator_epoch=0, timestamp=T0)


def values(log: Log) -> list[bytes | None]:
    return [r.value for b in iter_batches(log.read_records(0, 1 << 20)) if not b.header.is_control
            for r in b.records]


# the two ways a plain batch reaches the check: alone (the scalar path tries it
# first, then hands it to the scanned path) and with another batch (scanned only)
ALONE, WITH_ANOTHER = "alone", "with another"


def plain_request(shape: str, sequence: int) -> bytes:
    if shape == ALONE:
        return data(1, sequence=sequence, tag="plain")
    return data(1, sequence=sequence, tag="plain") + data(1, sequence=sequence + 1, tag="plain")


@pytest.mark.parametrize("config", [{}, {"cleanup_policy": "compact"}], ids=["delete", "compact"])
@pytest.mark.parametrize("shape", [ALONE, WITH_ANOTHER])
def test_a_plain_batch_while_the_producers_transaction_is_open_is_refused(tmp_path, shape, config):
    log = open_log(tmp_path, **config)
    log.append(data(2, transactional=True, tag="txn"))  # 0-1, sequences 0-1: the transaction opens
    end, lso, entry = log.log_end_offset, log.last_stable_offset, log.producer_state.entry(PID)
    assert entry is not None and entry.current_txn_first_offset == 0 and lso == 0
    with pytest.raises(InvalidTxnStateError) as refused:
        log.append(plain_request(shape, 2))
    assert refused.value.error_code == ErrorCode.invalid_txn_state
    # nothing appended, the producer's state untouched
    assert (log.log_end_offset, log.last_stable_offset) == (end, lso)
    after = log.producer_state.entry(PID)
    assert after is not None and (after.last_seq, after.current_txn_first_offset) == (1, 0)
    assert values(log) == [b"txn0", b"txn1"]
    # the marker ends the transaction: the same request is taken now, in sequence
    log.append(marker(COMMIT), origin=ORIGIN_COORDINATOR)  # 2
    appended = log.append(plain_request(shape, 2))
    assert appended.first_offset == 3
    assert values(log)[2:] == ([b"plain0"] if shape == ALONE else [b"plain0", b"plain0"])
    assert log.last_stable_offset == log.log_end_offset


def test_other_producers_and_the_transactional_batches_go_on_while_it_is_open(tmp_path):
    log = open_log(tmp_path)
    log.append(data(1, transactional=True))
    log.append(data(1, pid=PID + 1, tag="other"))  # another producer's plain batch
    log.append(data(1, sequence=1, transactional=True, tag="more"))  # the same transaction, next sequence
    assert values(log) == [b"v0", b"other0", b"more0"]
    entry = log.producer_state.entry(PID)
    assert entry is not None and entry.current_txn_first_offset == 0


def test_a_transactional_batch_does_not_reopen_a_committed_transaction_until_it_comes(tmp_path):
    log = open_log(tmp_path)
    log.append(data(1, transactional=True))
    log.append(marker(ABORT), origin=ORIGIN_COORDINATOR)
    log.append(data(1, sequence=1))  # a plain batch after the abort: the producer is idempotent again
    assert log.last_stable_offset == log.log_end_offset == 3
    log.append(data(1, sequence=2, transactional=True))  # a new transaction
    assert log.last_stable_offset == 3
    with pytest.raises(InvalidTxnStateError):
        log.append(data(1, sequence=3))


def test_a_plain_batch_of_a_newer_epoch_while_the_transaction_is_open_is_refused_too(tmp_path):
    log = open_log(tmp_path)
    log.append(data(1, transactional=True))
    with pytest.raises(InvalidTxnStateError):
        log.append(data(1, epoch=1, sequence=0))


def test_a_marker_of_an_older_epoch_is_refused(tmp_path):
    log = open_log(tmp_path)
    log.append(data(1, epoch=3, transactional=True))
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append(marker(ABORT, epoch=2), origin=ORIGIN_COORDINATOR)
    assert log.log_end_offset == end


def test_the_epoch_a_partition_knows_never_goes_back_for_data(tmp_path):
    log = open_log(tmp_path)
    log.append(data(1, epoch=3, transactional=True))
    log.append(marker(COMMIT, epoch=3), origin=ORIGIN_COORDINATOR)
    with pytest.raises(InvalidProducerEpochError):
        log.append(data(1, epoch=2, sequence=0, transactional=True))
    with pytest.raises(InvalidProducerEpochError):
        log.append(data(1, epoch=2, sequence=0))


# --- the broker's own transactional writes ------------------------------------------------------------
def coordinator_batch(epoch: int = 0, tag: str = "offset") -> bytes:
    """What the group coordinator appends for a TxnOffsetCommit: transactional, no sequence."""
    return encode_batch([Record(0, T0, b"key", tag.encode())], producer_id=PID, producer_epoch=epoch,
                        base_sequence=-1, transactional=True)


def test_a_coordinators_transactional_batch_without_a_sequence_is_taken_every_time(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact")  # as __consumer_offsets
    first = log.append(coordinator_batch(), origin=ORIGIN_COORDINATOR)
    again = log.append(coordinator_batch(), origin=ORIGIN_COORDINATOR)  # the same bytes: not a duplicate
    assert (first.first_offset, first.batches, again.first_offset, again.batches) == (0, 1, 1, 1)
    assert values(log) == [b"offset", b"offset"]
    assert log.last_stable_offset == 0  # one transaction, open from the first
    # a client may not send a batch with a producer id and no sequence
    with pytest.raises(InvalidRecordError):
        log.append(encode_batch([Record(0, T0, b"key", b"x")], producer_id=PID + 1, producer_epoch=0,
                                base_sequence=-1))


def test_a_coordinators_write_of_an_older_epoch_is_refused(tmp_path):
    log = open_log(tmp_path, cleanup_policy="compact")
    log.append(coordinator_batch(epoch=3), origin=ORIGIN_COORDINATOR)
    log.append(marker(ABORT, epoch=4), origin=ORIGIN_COORDINATOR)  # fenced: aborted under a bumped epoch
    end = log.log_end_offset
    with pytest.raises(InvalidProducerEpochError):
        log.append(coordinator_batch(epoch=3, tag="zombie"), origin=ORIGIN_COORDINATOR)
    assert log.log_end_offset == end
    appended = log.append(coordinator_batch(epoch=5, tag="next"), origin=ORIGIN_COORDINATOR)  # a newer epoch
    assert appended.first_offset == end and values(log) == [b"offset", b"next"]


def test_the_producer_state_checks_without_sequences_only_the_epoch():
    state = ProducerStateManager("/nonexistent")
    state.update(PID, 2, 0, 0, 0, 0, T0, transactional=True)
    checked = state.check_batches(_Columns(PID, 2, -1, 1), sequences=False)
    assert checked.verdict is Verdict.OK
    assert state.check_batches(_Columns(PID, 2, 0, 1)).verdict is Verdict.DUPLICATE  # with sequences: a retry
    assert state.check_batches(_Columns(PID, 1, -1, 1), sequences=False).verdict is Verdict.INVALID_PRODUCER_EPOCH
    plain = state.check_batches(_Columns(PID, 2, 1, 0), sequences=False)
    assert (plain.verdict, plain.error_code) == (Verdict.INVALID_TXN_STATE, ErrorCode.invalid_txn_state)


class _Columns:
    """One batch's header fields as the scan's columns (what ``check_batches`` reads)."""

    def __init__(self, pid: int, epoch: int, sequence: int, transactional: int):
        self.producer_id = [pid]
        self.producer_epoch = [epoch]
        self.base_sequence = [sequence]
        self.base_offset = [0]
        self.last_offset = [0]
        self.max_timestamp = [T0]
        self.attributes = [TRANSACTIONAL_BIT if transactional else 0]


def test_the_coordinator_epoch_of_a_marker_is_known_on_every_path(tmp_path):
    """The leader's append, a follower's copy and a replay without snapshots
    all learn the coordinator epoch from the marker itself, so a marker of a
    coordinator that has since been succeeded can be told apart wherever the
    partition is led next."""
    leader = open_log(tmp_path / "leader")
    leader.append(data(1, transactional=True))
    leader.append(encode_control_batch(COMMIT, producer_id=PID, producer_epoch=0, coordinator_epoch=7,
                                       timestamp=T0), origin=ORIGIN_COORDINATOR)
    entry = leader.producer_state.entry(PID)
    assert entry is not None and entry.coordinator_epoch == 7
    follower = open_log(tmp_path / "follower")
    follower.append_as_follower(leader.read_records(0, 1 << 20))
    entry = follower.producer_state.entry(PID)
    assert entry is not None and entry.coordinator_epoch == 7
    leader.close()
    for snapshot in (tmp_path / "leader" / "events-0").glob("*.snapshot"):
        snapshot.unlink()
    replayed = open_log(tmp_path / "leader")
    entry = replayed.producer_state.entry(PID)
    assert entry is not None and entry.coordinator_epoch == 7
    replayed.close()
    follower.close()
