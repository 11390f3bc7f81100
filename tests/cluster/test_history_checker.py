"""The history checker of tests.cluster.history on small hand-made histories:
a clean one passes, and each anomaly is found, counted and named (no brokers)."""

import pytest

from tests.cluster.history import Read, Send, acked, check, failed, indeterminate, value_of


def stored(*sends_and_extra) -> dict[int, list[tuple[int, bytes]]]:
    """A final read holding each acknowledged send at its own offset, plus
    (partition, offset, value) extras."""
    found: dict[int, list] = {}
    for item in sends_and_extra:
        if isinstance(item, Send):
            assert item.partition is not None  # acknowledged
            found.setdefault(item.partition, []).append((item.offset, item.value))
        else:
            partition, offset, value = item
            found.setdefault(partition, []).append((offset, value))
    return {p: sorted(entries) for p, entries in found.items()}


def clean_history():
    sends = [acked("p1", 0, 0, 0), acked("p1", 1, 1, 0), acked("p2", 0, 0, 1), acked("p1", 2, 0, 2),
             failed("p2", 1, "KafkaError{code=MSG_TIMED_OUT}"), indeterminate("p2", 2)]
    return sends, stored(*sends[:4])


def test_a_clean_history_passes_and_is_counted(capsys):
    sends, final = clean_history()
    live = [Read(0, 0, value_of("p1", 0)), Read(0, 0, value_of("p1", 0)), Read(1, 0, value_of("p1", 1))]
    report = check(sends, final, live).assert_valid()
    assert (report.sent, report.acked, report.failed, report.indeterminate) == (6, 4, 1, 1)
    assert (report.final_records, report.live_reads, report.foreign) == (4, 3, 0)
    assert report.valid and report.anomalies == {}
    assert "6 sends: 4 acknowledged, 1 failed" in capsys.readouterr().out


def test_failed_and_indeterminate_values_may_be_written_once():
    sends, final = clean_history()
    final[0].append((3, value_of("p2", 1)))
    final[0].append((4, value_of("p2", 2)))
    report = check(sends, final).assert_valid()
    assert (report.failed_written, report.indeterminate_written) == (1, 1)


def test_an_acknowledged_value_missing_is_lost():
    sends, final = clean_history()
    final[0] = [e for e in final[0] if e[1] != value_of("p2", 0)]
    report = check(sends, final)
    assert [s.value for s in report.lost] == [value_of("p2", 0)]
    assert [s.value for s, _ in report.wrong_offset] == [value_of("p2", 0)]  # its offset holds nothing
    with pytest.raises(AssertionError, match=r"lost \(acknowledged, missing from the final read\)"):
        report.assert_valid()


def test_a_value_at_two_offsets_is_duplicated_even_when_its_send_failed():
    sends, final = clean_history()
    final[1].append((1, value_of("p2", 1)))  # the failed send written twice
    final[1].append((2, value_of("p2", 1)))
    report = check(sends, final)
    assert report.duplicated == [(value_of("p2", 1), [(1, 1), (1, 2)])]
    assert set(report.anomalies) == {"duplicated"}


def test_an_acknowledged_value_written_again_later_is_duplicated():
    sends, final = clean_history()
    final[0].append((3, value_of("p1", 0)))
    assert check(sends, final).duplicated == [(value_of("p1", 0), [(0, 0), (0, 3)])]


def test_a_value_read_live_at_another_offset_is_duplicated():
    sends, final = clean_history()
    report = check(sends, final, [Read(1, 5, value_of("p1", 0))])
    assert report.duplicated == [(value_of("p1", 0), [(0, 0), (1, 5)])]


def test_an_acknowledged_offset_holding_another_value_is_a_wrong_offset():
    sends, final = clean_history()
    sends[1].offset = 7  # acknowledged at 1:7, stored at 1:0
    report = check(sends, final)
    assert [(s.value, found) for s, found in report.wrong_offset] == [(value_of("p1", 1), None)]
    assert not report.lost


def test_an_offset_read_with_two_values_is_inconsistent():
    sends, final = clean_history()
    live = [Read(0, 2, b"other")]  # a live read saw another record at 0:2 (a divergent leader)
    report = check(sends, final, live)
    assert report.inconsistent == [((0, 2), [value_of("p1", 2), b"other"])]
    assert [r.value for r in report.vanished] == [b"other"]  # and it is gone from the final read


def test_a_committed_value_read_live_but_missing_later_vanished():
    sends, final = clean_history()
    live = [Read(0, 3, value_of("p2", 2))]  # indeterminate send, seen live at 0:3, then truncated
    report = check(sends, final, live)
    assert report.vanished == [Read(0, 3, value_of("p2", 2))]
    assert set(report.anomalies) == {"vanished"}


def test_acknowledged_values_out_of_send_order_are_reordered():
    sends = [acked("p1", 0, 0, 0), acked("p1", 1, 0, 1), acked("p1", 2, 0, 2)]
    final = {0: [(0, value_of("p1", 0)), (1, value_of("p1", 2)), (2, value_of("p1", 1))]}
    report = check(sends, final)
    (producer, partition, earlier, later), = report.reordered
    assert (producer, partition, earlier[0].seq, earlier[1], later[0].seq, later[1]) == ("p1", 0, 1, 2, 2, 1)
    # order is per producer and partition: another producer interleaving is fine
    sends = [acked("p1", 0, 0, 0), acked("p2", 0, 0, 1), acked("p1", 1, 0, 2), acked("p2", 1, 1, 0)]
    assert not check(sends, stored(*sends)).reordered


def test_values_nobody_sent_are_counted_not_blamed():
    sends, final = clean_history()
    final[2] = [(0, b"from-someone-else")]
    report = check(sends, final).assert_valid()
    assert report.foreign == 1


def test_the_summary_shows_the_first_examples_of_each_anomaly():
    sends = [acked("p1", n, 0, n) for n in range(20)]
    report = check(sends, {0: []})
    text = report.summary(examples=3)
    assert "lost 20" in text and "first 3 of 20" in text
    assert text.count("p1-0000") == 6  # three lost, three at a wrong offset


def test_producer_and_consumer_histories_are_accepted_as_they_are():
    class Producers:
        sends = [acked("p1", 0, 0, 0)]

    class Consumer:
        reads = [Read(0, 0, value_of("p1", 0), 12.5)]

    report = check([Producers()], {0: [(0, value_of("p1", 0))]}, [Consumer()]).assert_valid()
    assert (report.acked, report.live_reads) == (1, 1)
