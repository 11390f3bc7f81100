"""The transactional history checker of tests.cluster.txn_history on small
hand-made histories: a clean one passes, and each anomaly is found (no brokers)."""

from tests.cluster.txn_history import Txn, check_transactions


def txn(tag: str, outcome: str, size: int = 2) -> Txn:
    return Txn(tag, [f"{tag}-{i}".encode() for i in range(size)], outcome)


def read(*values: bytes) -> dict[int, list[tuple[int, bytes]]]:
    """A read_committed read: ``values`` at consecutive offsets of partition 0."""
    return {0: list(enumerate(values))}


HISTORY = [txn("a", "committed"), txn("b", "aborted"), txn("c", "unknown"), txn("d", "unknown"),
           txn("e", "committed")]
CLEAN = (b"a-0", b"a-1", b"c-0", b"c-1", b"e-0", b"e-1")  # d's fate: none of it, which is allowed


def test_a_clean_history_passes_and_is_counted():
    report = check_transactions(HISTORY, read(*CLEAN))
    assert report.valid, report.summary()
    assert (report.committed, report.aborted, report.unknown) == (2, 1, 2)


def test_a_committed_record_missing_is_lost():
    report = check_transactions(HISTORY, read(*[v for v in CLEAN if v != b"e-1"]))
    assert report.lost == ["e"] and not report.valid


def test_an_unknown_transaction_half_there_is_torn():
    report = check_transactions(HISTORY, read(*CLEAN, b"d-0"))
    assert report.torn == ["d"] and not report.valid


def test_a_record_of_an_aborted_transaction_read():
    report = check_transactions(HISTORY, read(*CLEAN, b"b-1"))
    assert report.aborted_read == ["b"] and not report.valid


def test_a_value_at_two_offsets_is_duplicated():
    report = check_transactions(HISTORY, read(*CLEAN, b"a-0"))
    assert report.duplicated == [b"a-0"] and not report.valid


def test_a_value_nobody_wrote_is_a_stranger():
    report = check_transactions(HISTORY, read(*CLEAN, b"zz"))
    assert report.stranger == [b"zz"] and not report.valid
