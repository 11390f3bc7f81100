"""``hpbroker transactions list|describe|describe-producers`` as subprocesses
against a real broker, with transactions made by a confluent-kafka
transactional producer: one left open, one committed.

Each command costs a Python start (about a second), so the commands a test
needs are run side by side (``run_all``)."""

import datetime
import json
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.broker import REPO, free_port
from tests.integration.clients import topic_name

CLI_TIMEOUT_S = 60
TXN_TIMEOUT_MS = 45_000  # longer than the module takes: the open transaction stays open
PREFIX = "hpbroker transactions: "


def cli(*argv, broker=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hpbroker", *argv]
    if broker is not None:
        cmd += ["--bootstrap-server", broker.bootstrap]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=CLI_TIMEOUT_S)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done


def run_all(*commands, broker=None) -> list[subprocess.CompletedProcess]:
    """Run the argv lists at once (each is a Python start); results in order."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(lambda argv: cli(*argv, broker=broker), commands))


def ok(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 0, f"{done.args} exited {done.returncode}: {done.stderr.decode()}"
    return done.stdout.decode()


def failed(done: subprocess.CompletedProcess, status: int = 1) -> str:
    """The single stderr line of a command that had to fail with ``status``."""
    assert done.returncode == status, f"{done.args} exited {done.returncode}: {done.stderr.decode()}"
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1, f"wanted one line on stderr, got {lines}"
    return lines[0]


def table(text: str) -> list[list[str]]:
    """Whitespace-split rows of a borderless table, header first."""
    return [line.split() for line in text.splitlines() if line.strip()]


def by_id(text: str) -> dict[str, dict[str, str]]:
    """A table's rows as {header: cell} dicts, keyed by their TRANSACTIONAL-ID."""
    header, *rows = table(text)
    key = header.index("TRANSACTIONAL-ID")
    return {row[key]: dict(zip(header, row)) for row in rows}


class Txns:
    """What the module's producers did: ids, the topic, the producer ids."""

    def __init__(self, topic: str, open_id: str, done_id: str):
        self.topic, self.open_id, self.done_id = topic, open_id, done_id
        self.open_pid = self.done_pid = -1


@pytest.fixture(scope="module")
def txns(broker):
    topic = topic_name("cli-txn")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    made = Txns(topic, topic_name("open-txn"), topic_name("done-txn"))

    def producer(transactional_id: str) -> ck.Producer:
        p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": transactional_id,
                         "transaction.timeout.ms": TXN_TIMEOUT_MS, "linger.ms": 5})
        p.init_transactions(30)
        p.begin_transaction()
        return p

    open_producer = producer(made.open_id)  # partition 0: one record, partition 1: two (offsets 0, 1)
    for partition in (0, 1, 1):
        open_producer.produce(topic, b"open", partition=partition)
    assert open_producer.flush(30) == 0
    done_producer = producer(made.done_id)  # partition 1: offset 2, then its COMMIT marker
    done_producer.produce(topic, b"done", partition=1)
    done_producer.commit_transaction(30)
    listed = by_id(ok(cli("transactions", "list", broker=broker)))
    made.open_pid = int(listed[made.open_id]["PRODUCER-ID"])
    made.done_pid = int(listed[made.done_id]["PRODUCER-ID"])
    yield made
    open_producer.abort_transaction(30)  # before the broker stops: no reconnect noise from librdkafka
    del open_producer, done_producer


def test_list_shows_the_open_and_the_committed_transaction(broker, txns):
    text, as_json = run_all(["transactions", "list"], ["transactions", "list", "--json"], broker=broker)
    rows = table(ok(text))
    assert rows[0] == ["TRANSACTIONAL-ID", "COORDINATOR", "PRODUCER-ID", "STATE"]
    listed = by_id(ok(text))
    assert listed[txns.open_id]["STATE"] == "Ongoing"
    assert listed[txns.done_id]["STATE"] == "CompleteCommit"
    assert txns.open_pid >= 0 and txns.done_pid >= 0 and txns.open_pid != txns.done_pid
    assert [r[0] for r in rows[1:]] == sorted(r[0] for r in rows[1:])
    assert {r["transactional_id"]: (r["producer_id"], r["state"]) for r in json.loads(ok(as_json))} == \
        {tid: (int(r["PRODUCER-ID"]), r["STATE"]) for tid, r in listed.items()}


def test_list_filters(broker, txns):
    ongoing, committed, both_states, by_pid, long_running, bad_state = run_all(
        ["transactions", "list", "--state", "Ongoing"],
        ["transactions", "list", "--state", "CompleteCommit"],
        ["transactions", "list", "--state", "Ongoing", "--state", "CompleteCommit", "--producer-id", "999999"],
        ["transactions", "list", "--producer-id", str(txns.done_pid)],
        ["transactions", "list", "--duration-ms", str(10 * 60_000)],
        ["transactions", "list", "--state", "Ongoing", "Bogus"],
        broker=broker)
    assert set(by_id(ok(ongoing))) == {txns.open_id}
    assert set(by_id(ok(committed))) == {txns.done_id}
    assert by_id(ok(both_states)) == {}  # the filters all hold: no producer 999999
    assert set(by_id(ok(by_pid))) == {txns.done_id}
    assert by_id(ok(long_running)) == {}  # nothing has run for ten minutes
    assert failed(bad_state) == PREFIX + "unknown --state 'Bogus': the states are Empty, Ongoing, PrepareCommit, " \
        "PrepareAbort, CompleteCommit, CompleteAbort, PrepareEpochFence, Dead"


def test_describe_open_committed_and_unknown(broker, txns):
    unknown = topic_name("no-such-txn")
    open_text, done_json, missing = run_all(
        ["transactions", "describe", "--transactional-id", txns.open_id],
        ["transactions", "describe", "--transactional-id", txns.done_id, "--json"],
        ["transactions", "describe", "--transactional-id", unknown],
        broker=broker)
    header, row = table(ok(open_text))
    assert header == ["COORDINATOR", "TRANSACTIONAL-ID", "PRODUCER-ID", "EPOCH", "STATE", "TIMEOUT-MS",
                      "START-TIME", "DURATION", "TOPIC-PARTITIONS"]
    described = dict(zip(header, row))
    assert described["TRANSACTIONAL-ID"] == txns.open_id
    assert int(described["PRODUCER-ID"]) == txns.open_pid and described["EPOCH"] == "0"
    assert described["STATE"] == "Ongoing" and described["TIMEOUT-MS"] == str(TXN_TIMEOUT_MS)
    started = datetime.datetime.fromisoformat(described["START-TIME"])
    assert started.tzinfo is not None
    assert abs(time.time() - started.timestamp()) < 300
    assert described["DURATION"].endswith("s")
    assert described["TOPIC-PARTITIONS"] == f"{txns.topic}-0,{txns.topic}-1"

    done = json.loads(ok(done_json))
    assert done["transactional_id"] == txns.done_id and done["producer_id"] == txns.done_pid
    assert done["state"] == "CompleteCommit" and done["timeout_ms"] == TXN_TIMEOUT_MS
    assert done["partitions"] == [] and done["duration_ms"] is None  # ended: no partitions, not running
    assert done["coordinator"] == int(described["COORDINATOR"])

    assert failed(missing) == PREFIX + f"transactional id {unknown!r} does not exist"


def test_describe_producers_of_a_partition(broker, txns):
    text, as_json, no_partition, no_topic = run_all(
        ["transactions", "describe-producers", "--topic", txns.topic, "--partition", "1"],
        ["transactions", "describe-producers", "--topic", txns.topic, "--partition", "0", "--json"],
        ["transactions", "describe-producers", "--topic", txns.topic, "--partition", "5"],
        ["transactions", "describe-producers", "--topic", "no-such-topic", "--partition", "0"],
        broker=broker)
    header, *rows = table(ok(text))
    assert header == ["PRODUCER-ID", "EPOCH", "LAST-SEQUENCE", "LAST-TIMESTAMP", "COORDINATOR-EPOCH",
                      "TXN-START-OFFSET"]
    producers = {int(r[0]): dict(zip(header, r)) for r in rows}
    assert set(producers) == {txns.open_pid, txns.done_pid}
    still_open, committed = producers[txns.open_pid], producers[txns.done_pid]
    # the open transaction's first record on partition 1 is offset 0: it holds the LSO there
    assert (still_open["EPOCH"], still_open["LAST-SEQUENCE"], still_open["TXN-START-OFFSET"]) == ("0", "1", "0")
    assert (committed["EPOCH"], committed["LAST-SEQUENCE"], committed["TXN-START-OFFSET"]) == ("0", "0", "-")
    for producer in producers.values():
        assert abs(time.time() - datetime.datetime.fromisoformat(producer["LAST-TIMESTAMP"]).timestamp()) < 300

    on_zero = json.loads(ok(as_json))
    assert on_zero["topic"] == txns.topic and on_zero["partition"] == 0
    [only] = on_zero["producers"]
    assert only["producer_id"] == txns.open_pid and only["last_sequence"] == 0
    assert only["current_txn_start_offset"] == 0

    assert failed(no_partition) == PREFIX + f"topic {txns.topic!r} has no partition 5"
    assert failed(no_topic) == PREFIX + "topic 'no-such-topic' does not exist"


def test_help_and_an_unreachable_broker():
    port = free_port()
    started = time.monotonic()
    top, group, down, bad_args = run_all(
        ["--help"], ["transactions", "--help"],
        ["transactions", "list", "--bootstrap-server", f"127.0.0.1:{port}"],
        ["transactions", "describe-producers", "--topic", "t"])
    assert "transactions" in ok(top)
    help_text = " ".join(ok(group).split())
    for action in ("list", "describe", "describe-producers"):
        assert re.search(rf"^ +{action}\s", ok(group), re.MULTILINE), action
    assert "ListTransactions" in help_text and "DescribeProducers" in help_text
    assert failed(down) == PREFIX + f"cannot reach 127.0.0.1:{port} (connection refused)"
    assert time.monotonic() - started < 30
    assert "the following arguments are required: --partition" in bad_args.stderr.decode()
    assert bad_args.returncode == 2
