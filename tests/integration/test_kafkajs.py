"""kafkajs (Node.js), the client of many JavaScript services, against a real
broker: its transactional producer commits, aborts and commits a group's
offsets in a transaction; a second instance fences the first; a producer
that dies in a transaction is aborted at its timeout; and its consumer reads
committed records only.  kafkajs is installed with npm into ``.venv/node`` on
first use."""

import json
import shutil
import subprocess
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.clients import ck_read_committed, topic_name

REPO = Path(__file__).resolve().parents[2]
JS = Path(__file__).resolve().parent / "js"
SCRIPT = JS / "kafkajs_transactions.js"
KAFKAJS = "kafkajs@2.2.4"


@pytest.fixture(scope="session")
def node_modules() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.fail("Node.js and npm are needed (scripts/ensure-system-packages.sh installs them)")
    prefix = REPO / ".venv" / "node"
    if not (prefix / "node_modules" / "kafkajs" / "package.json").exists():
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--silent", KAFKAJS],
                       check=True, timeout=300)
    return prefix / "node_modules"


def node(node_modules: Path, script: Path, *args: str) -> dict:
    """Run a test script under Node.js; the JSON line it printed last."""
    run = subprocess.run(["node", str(script), *args],
                         env={"NODE_PATH": str(node_modules), "PATH": "/usr/bin:/bin:/usr/local/bin"},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_kafkajs_transactions(broker, node_modules):
    topic, group = topic_name("kafkajs"), topic_name("kafkajs-group")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    run = node(node_modules, SCRIPT, broker.bootstrap, topic, f"kafkajs-{topic}", group)
    committed = sorted([f"committed-{i}" for i in range(10)] + [f"with-offsets-{i}" for i in range(4)])
    assert sorted(run["read"]) == committed  # kafkajs reads committed only
    assert sorted(v.decode() for v in ck_read_committed(broker.bootstrap, topic, range(2), 14)) == committed
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        [offset] = consumer.committed([ck.TopicPartition(topic, 0)], 30)
    finally:
        consumer.close()
    assert offset.offset == 7  # the offsets committed in the transaction took effect with it


def test_kafkajs_fencing_and_a_producer_dying_in_its_transaction(broker_factory, node_modules):
    broker = broker_factory({"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    topic = topic_name("kafkajs-fencing")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    run = node(node_modules, JS / "kafkajs_fencing.js", broker.bootstrap, topic, f"kafkajs-{topic}")
    assert run["fenced"] in ("INVALID_PRODUCER_EPOCH", "PRODUCER_FENCED")  # the first instance's commit failed
    # the fenced and the dead producers' records are never read; the reader got past both
    assert sorted(run["read"]) == ["after-0", "second-0"]
    assert sorted(v.decode() for v in ck_read_committed(broker.bootstrap, topic, range(1), 2)) == [
        "after-0", "second-0"]
