"""A broker process joining a cluster: what it writes to ZooKeeper and its
log dir, the one-line errors when it cannot join, how it leaves, and
``hpbroker cluster`` (on a cluster and on a standalone broker)."""

import os
import re
import signal
import subprocess
import sys
import time

import pytest

from harness.broker import REPO, Broker, free_port
from harness.cluster import FAST, SESSION_MS, Cluster
from harness.waiting import wait_for
from hpbroker.cluster import session, znodes
from hpbroker.storage import checkpoints


@pytest.fixture
def cluster(zookeeper, chroot, tmp_path):
    found = Cluster(chroot, tmp_path, 2)
    yield found
    found.close()


def serve(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpbroker", "serve", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpbroker", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60)


def test_registration_cluster_id_and_a_clean_leave(cluster, tmp_path):
    cluster.start_all()
    data, _stat = cluster.zk.get(znodes.broker_path(1))
    registration = znodes.BrokerRegistration.decode(1, data)
    assert (registration.host, registration.port) == ("127.0.0.1", cluster.brokers[1].port)
    cluster_id = znodes.decode_cluster_id(cluster.zk.get(znodes.CLUSTER_ID)[0])
    for broker_id, broker in cluster.brokers.items():
        props = checkpoints.read_properties(str(broker.data_dir / "meta.properties"))
        assert props["cluster.id"] == cluster_id and props["broker.id"] == str(broker_id)

    started = time.monotonic()
    cluster.stop(1)  # SIGTERM: exit 0 and a clean-shutdown marker are asserted by stop()
    assert 1 not in cluster.registered()  # gone at once, not after the session timeout
    assert time.monotonic() - started < 30

    listed = subprocess.run([sys.executable, "-m", "hpbroker", "cluster", "--bootstrap-server",
                             cluster.brokers[2].bootstrap, "--json"], cwd=REPO, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert f'"cluster_id": "{cluster_id}"' in listed.stdout and '"id": 2' in listed.stdout


def test_a_generated_broker_id_is_kept_across_restarts(zookeeper, chroot, tmp_path):
    overrides = {**FAST, "zookeeper.connect": chroot}
    broker = Broker(tmp_path / "generated", overrides=overrides).start()
    try:
        props = checkpoints.read_properties(str(tmp_path / "generated" / "meta.properties"))
        generated = int(props["broker.id"])
        assert generated > znodes.RESERVED_BROKER_MAX_ID
        broker.restart()
        props = checkpoints.read_properties(str(tmp_path / "generated" / "meta.properties"))
        assert props["broker.id"] == str(generated)
        assert generated in {int(c) for c in session_children(chroot, znodes.BROKER_IDS)}

        # the sources set no broker.id: a reload must not take the settled one for a change
        os.kill(broker.pid, signal.SIGHUP)
        reloaded = wait_for(lambda: re.search(r"reloaded: changed [^\n]*", broker.log_text(since_start=True)), 30,
                            "the reload to be logged")
        assert reloaded.group(0) == "reloaded: changed nothing", broker.log_tail()
    finally:
        broker.stop()


def test_an_unreachable_zookeeper_is_one_line(tmp_path):
    port = free_port()  # nobody listens there
    started = time.monotonic()
    result = serve(["--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}",
                    "--set", f"zookeeper.connect=127.0.0.1:{port}", "--set", "zookeeper.connection.timeout.ms=2000"])
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    # it tried for the connection timeout, then gave up (the rest is the interpreter's start, on a shared machine)
    assert 2.0 <= elapsed < 15, f"exited after {elapsed:.1f} s"
    errors = [line for line in result.stderr.splitlines() if line.startswith("hpbroker serve:")]
    assert errors == [f"hpbroker serve: could not connect to ZooKeeper at 127.0.0.1:{port} within 2000 ms "
                      "(zookeeper.connection.timeout.ms)"], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_a_live_duplicate_id_and_a_foreign_log_dir_are_refused(cluster, chroot, tmp_path):
    cluster.start_all()
    twin = serve(["--data-dir", str(tmp_path / "twin"), "--listen", f"127.0.0.1:{free_port()}",
                  "--set", f"zookeeper.connect={chroot}", "--set", "broker.id=1",
                  "--set", "zookeeper.session.timeout.ms=2000"])
    assert twin.returncode == 1
    assert "hpbroker serve: broker.id 1 is registered by another live broker" in twin.stderr
    assert "Traceback" not in twin.stderr

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    checkpoints.write_properties(str(foreign / "meta.properties"),
                                 {"version": "0", "broker.id": "7", "cluster.id": "AAAAAAAAAAAAAAAAAAAAAA"})
    refused = serve(["--data-dir", str(foreign), "--listen", f"127.0.0.1:{free_port()}",
                     "--set", f"zookeeper.connect={chroot}", "--set", "broker.id=7"])
    assert refused.returncode == 1
    lines = [line for line in refused.stderr.splitlines() if line.startswith("hpbroker serve:")]
    assert len(lines) == 1 and "AAAAAAAAAAAAAAAAAAAAAA" in lines[0], refused.stderr[-2000:]
    wait_for(lambda: 7 not in cluster.registered(), 10, "the refused broker to leave no registration")


def session_children(connect: str, path: str) -> list[str]:
    client = session.connect(connect, SESSION_MS, 10000)
    try:
        return client.get_children(path)
    finally:
        session.close(client)


def test_a_second_sigterm_skips_the_controlled_shutdown(zookeeper, chroot, tmp_path):
    # Broker 2 is the controller and gets paused, so nobody can move broker 1's
    # leadership away; long sessions and a long lag time keep broker 2
    # registered and in the ISR for longer than the test needs, so the first
    # SIGTERM's hand-over cannot finish on its own.
    cluster = Cluster(chroot, tmp_path, 2, overrides={"zookeeper.session.timeout.ms": "45000",
                                                      "replica.lag.time.max.ms": "120000",
                                                      "controlled.shutdown.max.retries": "90"})
    try:
        cluster.start(2)
        assert cluster.controller() == 2
        cluster.start(1)
        topic_id = checkpoints.kafka_uuid_string(checkpoints.new_kafka_uuid())
        assignment = znodes.TopicAssignment("handover", {0: [1, 2]}, topic_id)
        cluster.zk.create(znodes.topic_path("handover"), assignment.encode())
        wait_for(lambda: cluster.zk.exists(znodes.partition_state_path("handover", 0))
                 and (state := cluster.state("handover", 0)).leader == 1 and sorted(state.isr) == [1, 2], 60,
                 "broker 1 to lead handover-0 with both replicas in sync")
        cluster.pause(2)

        broker = cluster.brokers[1]
        os.kill(broker.pid, signal.SIGTERM)
        wait_for(lambda: cluster.zk.exists(znodes.controlled_shutdown_path(1)), 30,
                 "broker 1 to ask the controller for a controlled shutdown")
        assert broker.proc is not None and broker.proc.poll() is None and 1 in cluster.registered(), \
            broker.log_tail()

        started = time.monotonic()
        broker.stop(timeout=25)  # the second SIGTERM: exit 0 and a clean-shutdown marker, or BrokerError
        assert time.monotonic() - started < 25
        assert 1 not in cluster.registered()
        assert cluster.state("handover", 0).leader == 1  # nobody moved it: the wait was cut short, not completed
        text = broker.log_text(since_start=True)
        assert "controlled shutdown first" in text and "controlled shutdown complete" not in text, broker.log_tail()
    finally:
        cluster.close()


def test_hpbroker_cluster_on_a_standalone_broker(tmp_path):
    broker = Broker(tmp_path / "solo", num_workers=1).start()
    try:
        listed = cli("cluster", "--bootstrap-server", broker.bootstrap)
        assert listed.returncode == 0, listed.stderr
        cluster_id = checkpoints.read_properties(str(tmp_path / "solo" / "meta.properties"))["cluster.id"]
        lines = [line.split() for line in listed.stdout.splitlines() if line.strip()]
        assert lines[0] == ["Cluster:", cluster_id, "Controller:", "0", "Brokers:", "1"], listed.stdout
        assert lines[1] == ["BROKER", "HOST", "PORT", "RACK", "CONTROLLER"], listed.stdout
        assert lines[2:] == [["0", "127.0.0.1", str(broker.port), "-", "yes"]], listed.stdout
    finally:
        broker.stop()

    refused = cli("cluster", "--bootstrap-server", broker.bootstrap, "--timeout", "3")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and refused.stderr.startswith("hpbroker cluster:"), \
        refused.stderr
