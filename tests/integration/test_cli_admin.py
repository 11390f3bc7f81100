"""The admin and console commands (``hpbroker topics|groups|produce|consume|offsets``)
run as subprocesses against a real broker: tables and --json carry the same
facts, failures are one line on stderr with status 1, and nothing prints a traceback."""

import json
import re
import subprocess
import sys
import time

import pytest

from harness.broker import REPO, free_port
from harness.waiting import wait_for
from tests.integration.clients import ck_produce, topic_name

CLI_TIMEOUT_S = 60


def cli(*argv, broker=None, input: bytes | None = None, timeout: float = CLI_TIMEOUT_S) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "hpbroker", *argv]
    if broker is not None:
        cmd += ["--bootstrap-server", broker.bootstrap]
    done = subprocess.run(cmd, cwd=REPO, input=input, capture_output=True, timeout=timeout)
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    return done


def ok(*argv, **kw) -> str:
    done = cli(*argv, **kw)
    assert done.returncode == 0, f"{argv} exited {done.returncode}: {done.stderr.decode()}"
    return done.stdout.decode()


def failed(*argv, status: int = 1, **kw) -> str:
    """Run a command that must fail; returns its single stderr line."""
    done = cli(*argv, **kw)
    assert done.returncode == status, f"{argv} exited {done.returncode}, wanted {status}: {done.stderr.decode()}"
    if status == 1:
        lines = done.stderr.decode().splitlines()
        assert len(lines) == 1, f"wanted one line on stderr, got {lines}"
        return lines[0]
    return done.stderr.decode()


def table_rows(text: str) -> list[list[str]]:
    """Whitespace-split rows of a borderless table, header first."""
    return [line.split() for line in text.splitlines() if line.strip()]


# --- topics -------------------------------------------------------------------------
def test_create_list_describe_a_topic(broker):
    topic = topic_name("cli-topic")
    assert ok("topics", "create", topic, "--partitions", "3", "--replication-factor", "1",
              "--config", "retention.ms=86400000", broker=broker).strip() == f"Created topic {topic}."
    ck_produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 1} for i in range(5)])

    rows = table_rows(ok("topics", "list", broker=broker))
    assert rows[0] == ["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"]
    assert [topic, "3", "1"] in rows[1:]
    listed = json.loads(ok("topics", "list", "--json", broker=broker))
    assert {"topic": topic, "partitions": 3, "replication_factor": 1} in listed

    [described] = json.loads(ok("topics", "describe", topic, "--json", broker=broker))
    assert described["topic"] == topic and described["partition_count"] == 3
    assert described["configs"] == {"retention.ms": "86400000"}  # only what differs from the defaults
    # as Kafka prints it, and as partition.metadata holds it: URL-safe base64 without padding
    on_disk = (broker.data_dir / f"{topic}-0" / "partition.metadata").read_text().split("topic_id:")[1].strip()
    assert described["topic_id"] == on_disk and re.fullmatch(r"[A-Za-z0-9_-]{22}", on_disk)
    by_partition = {p["partition"]: p for p in described["partitions"]}
    assert sorted(by_partition) == [0, 1, 2]
    assert by_partition[1]["log_start_offset"] == 0 and by_partition[1]["log_end_offset"] == 5
    assert by_partition[0]["log_end_offset"] == 0
    for p in by_partition.values():
        assert p["leader"] is not None and p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]]

    text = ok("topics", "describe", topic, broker=broker)
    first, *rest = text.splitlines()
    assert first.startswith(f"Topic: {topic}  TopicId: ") and "PartitionCount: 3" in first
    assert "Configs: retention.ms=86400000" in first
    rows = table_rows("\n".join(rest))
    assert rows[0] == ["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "LOG-START-OFFSET", "LOG-END-OFFSET"]
    assert rows[2][0] == "1" and rows[2][4:] == ["-", "0", "5"]


def test_create_twice_and_delete(broker):
    topic = topic_name("cli-delete")
    ok("topics", "create", topic, "--partitions", "1", broker=broker)
    assert failed("topics", "create", topic, broker=broker) == \
        f"hpbroker topics: cannot create topic '{topic}': it already exists"
    assert ok("topics", "create", topic, "--if-not-exists", broker=broker).strip() == f"Topic {topic} already exists."
    assert ok("topics", "delete", topic, broker=broker).strip() == f"Deleted topic {topic}."
    wait_for(lambda: topic not in ok("topics", "list", broker=broker), 10, "the topic to leave the listing")
    assert failed("topics", "delete", topic, broker=broker) == \
        f"hpbroker topics: cannot delete topic '{topic}': no such topic"
    ok("topics", "delete", topic, "--if-exists", broker=broker)


def test_alter_config_sets_it_or_says_the_broker_cannot(broker):
    topic = topic_name("cli-alter")
    ok("topics", "create", topic, "--partitions", "1", broker=broker)
    done = cli("topics", "alter-config", topic, "--set", "retention.ms=3600000", broker=broker)
    if done.returncode == 0:
        [described] = json.loads(ok("topics", "describe", topic, "--json", broker=broker))
        assert described["configs"].get("retention.ms") == "3600000"
    else:
        assert done.returncode == 1
        assert done.stderr.decode().strip() == ("hpbroker topics: the broker does not support IncrementalAlterConfigs "
                                                "(API key 44), so topic configs cannot be changed")


# --- failures -----------------------------------------------------------------------
def test_unknown_topic_is_one_line(broker):
    assert failed("topics", "describe", "no-such-topic", broker=broker) == \
        "hpbroker topics: topic 'no-such-topic' does not exist"
    assert failed("offsets", "no-such-topic", broker=broker) == "hpbroker offsets: topic 'no-such-topic' does not exist"
    assert failed("consume", "no-such-topic", broker=broker) == "hpbroker consume: topic 'no-such-topic' does not exist"


@pytest.mark.parametrize("argv", [["topics", "list"], ["groups", "list"], ["offsets", "t"], ["consume", "t"],
                                  ["produce", "t"]])
def test_broker_down_is_one_line(argv):
    port = free_port()
    started = time.monotonic()
    line = failed(*argv, "--bootstrap-server", f"127.0.0.1:{port}", input=b"x\n")
    assert line == f"hpbroker {argv[0]}: cannot reach 127.0.0.1:{port} (connection refused)"
    assert time.monotonic() - started < 10


def test_a_broker_that_never_answers_is_bounded_by_timeout():
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        started = time.monotonic()
        line = failed("topics", "list", "--bootstrap-server", f"127.0.0.1:{port}", "--timeout", "2")
    assert line.startswith(f"hpbroker topics: cannot reach 127.0.0.1:{port} (no Kafka answer within 2 s")
    assert time.monotonic() - started < 10


def test_bad_arguments(broker):
    assert "the following arguments are required: TOPIC" in failed("topics", "create", status=2)
    assert "--timeout" in failed("topics", "list", "--timeout", "0", status=2)
    assert failed("topics", "create", "x", "--config", "nonsense", broker=broker) == \
        "hpbroker topics: --config wants KEY=VALUE, got 'nonsense'"
    assert failed("topics", "alter-config", "x", broker=broker) == \
        "hpbroker topics: nothing to change: give --set KEY=VALUE or --delete KEY"
    assert failed("consume", "x", "--format", "%q", broker=broker).startswith(
        "hpbroker consume: unknown placeholder '%q' in --format")
    assert failed("offsets", "x", "--time", "yesterday", broker=broker).startswith("hpbroker offsets: bad time")
    assert failed("topics", "list", "--bootstrap-server", "nohostport") == \
        "hpbroker topics: bad --bootstrap-server 'nohostport': want HOST:PORT"


# --- produce / consume / offsets ------------------------------------------------------
def test_produce_consume_round_trip_with_keys_and_headers(broker):
    topic = topic_name("cli-roundtrip")
    ok("topics", "create", topic, "--partitions", "2", broker=broker)
    lines = b"trace:t1,lang:en\tk1=hello\n\tk2=world\n\tno key here\n"
    ok("produce", topic, "--headers", "--key-separator", "=", "--header", "source=cli", "--compression", "lz4",
       "--partition", "1", broker=broker, input=lines)

    records = [json.loads(line) for line in
               ok("consume", topic, "--from-beginning", "--exit-at-end", "--json", broker=broker).splitlines()]
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in records] == \
        [(1, 0, "k1", "hello"), (1, 1, "k2", "world"), (1, 2, None, "no key here")]
    assert records[0]["headers"] == [["source", "cli"], ["trace", "t1"], ["lang", "en"]]
    assert records[1]["headers"] == [["source", "cli"]]

    text = ok("consume", topic, "--from-beginning", "--exit-at-end", "--partition", "1",
              "--format", "%t|%p|%o|%k|%s|%h|%K|%S\\n", broker=broker)
    assert text.splitlines() == [f"{topic}|1|0|k1|hello|source=cli,trace=t1,lang=en|2|5",
                                 f"{topic}|1|1|k2|world|source=cli|2|5",
                                 f"{topic}|1|2||no key here|source=cli|-1|11"]
    assert ok("consume", topic, "--partition", "1", "--offset", "1", "--max-messages", "1",
              broker=broker) == "world\n"
    assert ok("consume", topic, "--partition", "1", "--offset", "-1", "--exit-at-end", broker=broker) == "no key here\n"
    assert ok("consume", topic, "--exit-at-end", broker=broker) == ""  # from the end: nothing new


def test_produce_a_file_from_stdin(broker, tmp_path):
    topic = topic_name("cli-file")
    ok("topics", "create", topic, "--partitions", "3", broker=broker)
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(20_000)))
    with open(path, "rb") as stdin:
        done = subprocess.run([sys.executable, "-m", "hpbroker", "produce", topic, "--bootstrap-server",
                               broker.bootstrap], cwd=REPO, stdin=stdin, capture_output=True, timeout=CLI_TIMEOUT_S)
    assert done.returncode == 0 and done.stderr == b"", done.stderr  # no bar when stderr is not a terminal
    offsets = json.loads(ok("offsets", topic, "--json", broker=broker))
    assert sum(o["latest"] - o["earliest"] for o in offsets) == 20_000
    got = ok("consume", topic, "--from-beginning", "--exit-at-end", broker=broker).splitlines()
    assert sorted(got) == sorted(f"line {i}" for i in range(20_000))


def test_offsets_table_json_and_time(broker):
    topic = topic_name("cli-offsets")
    ok("topics", "create", topic, "--partitions", "2", broker=broker)
    ck_produce(broker.bootstrap, topic, [{"value": b"a", "partition": 0, "timestamp": 1_000_000 + i} for i in range(4)])
    rows = table_rows(ok("offsets", topic, broker=broker))
    assert rows == [["TOPIC", "PARTITION", "EARLIEST", "LATEST"], [topic, "0", "0", "4"], [topic, "1", "0", "0"]]
    at = json.loads(ok("offsets", topic, "--time", "1000002", "--json", broker=broker))
    assert at[0] == {"topic": topic, "partition": 0, "earliest": 0, "latest": 4, "offset_for_time": 2}
    assert at[1]["offset_for_time"] is None  # nothing at or after that time
    iso = json.loads(ok("offsets", topic, "--time", "1970-01-01T00:16:40.003Z", "--partition", "0", "--json",
                        broker=broker))
    assert [o["offset_for_time"] for o in iso] == [3]


# --- groups ---------------------------------------------------------------------------
def _describe_group(broker, group):
    return json.loads(ok("groups", "describe", group, "--json", broker=broker))[0]


def test_groups_list_describe_and_reset(broker):
    topic, group = topic_name("cli-groups"), topic_name("cli-group")
    ok("topics", "create", topic, "--partitions", "2", broker=broker)
    ok("produce", topic, "--key-separator", ":", broker=broker,
       input=b"".join(b"k%d:v%d\n" % (i, i) for i in range(10)))
    ends = {o["partition"]: o["latest"] for o in json.loads(ok("offsets", topic, "--json", broker=broker))}
    assert sum(ends.values()) == 10
    # a group member reads everything and commits as it goes
    ok("consume", topic, "--group", group, "--from-beginning", "--max-messages", "10", broker=broker)

    assert [group, "Classic", "Empty"] in table_rows(ok("groups", "list", broker=broker))
    assert {"group": group, "type": "Classic", "state": "Empty", "simple": False} in json.loads(
        ok("groups", "list", "--json", broker=broker))
    described = _describe_group(broker, group)
    assert (described["type"], described["state"], described["members"]) == ("Classic", "Empty", [])
    lag = {p["partition"]: (p["committed_offset"], p["log_end_offset"], p["lag"]) for p in described["partitions"]}
    assert lag == {p: (end, end, 0) for p, end in ends.items()}
    rows = table_rows(ok("groups", "describe", group, broker=broker).split("\n", 1)[1])
    assert rows[0] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
                       "CLIENT-ID"]

    # dry run (the default) shows the plan and changes nothing
    done = cli("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", broker=broker)
    assert done.returncode == 0 and b"Dry run" in done.stderr
    plan = table_rows(done.stdout.decode())
    assert plan[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"]
    assert plan[1:] == [[group, topic, str(p), str(end), "0"] for p, end in sorted(ends.items())]
    assert {p["partition"]: p["committed_offset"] for p in _describe_group(broker, group)["partitions"]} == ends

    # --execute commits it; --shift-by and --to-offset clamp to the log
    ok("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", broker=broker)
    assert {p["partition"]: p["lag"] for p in _describe_group(broker, group)["partitions"]} == ends
    shifted = json.loads(ok("groups", "reset-offsets", group, "--all-topics", "--shift-by", "-5", "--execute",
                            "--json", broker=broker))
    assert [r["new_offset"] for r in shifted] == [0, 0]
    moved = json.loads(ok("groups", "reset-offsets", group, "--topic", f"{topic}:0", "--to-offset", "1000", "--execute",
                          "--json", broker=broker))
    assert moved == [{"group": group, "topic": topic, "partition": 0, "current_offset": 0, "new_offset": ends[0]}]
    assert ok("consume", topic, "--group", group, "--exit-at-end", broker=broker).count("\n") == ends[1]


def test_reset_refuses_an_active_group(broker):
    topic, group = topic_name("cli-active"), topic_name("cli-active-group")
    ok("topics", "create", topic, "--partitions", "1", broker=broker)
    member = subprocess.Popen([sys.executable, "-m", "hpbroker", "consume", topic, "--group", group,
                               "--bootstrap-server", broker.bootstrap], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        def stable():
            if cli("groups", "describe", group, "--json", broker=broker).returncode != 0:
                return None
            described = _describe_group(broker, group)
            return described if described["state"] == "Stable" else None

        described = wait_for(stable, 30, "the console consumer to join and get its partition")
        [m] = described["members"]
        assert m["assignment"] == [f"{topic}[0]"]
        line = failed("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", broker=broker)
        assert line.startswith(f"hpbroker groups: offsets of group '{group}' can only be reset while it is inactive")
    finally:
        member.terminate()
        member.wait(10)


def test_unknown_group(broker):
    assert failed("groups", "describe", "no-such-group", broker=broker) == \
        "hpbroker groups: consumer group 'no-such-group' does not exist"
