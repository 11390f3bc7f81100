"""A broker process joining a cluster: what it writes to ZooKeeper and its
log dir, and the one-line errors when it cannot join."""

import subprocess
import sys
import time

import pytest

from hpbroker.cluster import znodes
from hpbroker.storage import checkpoints
from tests.cluster.brokers import FAST, Cluster
from tests.integration.broker import REPO, Broker, free_port, wait_for


@pytest.fixture
def cluster(zookeeper, chroot, tmp_path):
    found = Cluster(chroot, tmp_path, 2)
    yield found
    found.close()


def serve(args: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hpbroker", "serve", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout)


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
        assert checkpoints.read_properties(str(tmp_path / "generated" / "meta.properties"))["broker.id"] == str(generated)
    finally:
        broker.stop()


def test_an_unreachable_zookeeper_is_one_line(tmp_path):
    port = free_port()  # nobody listens there
    result = serve(["--data-dir", str(tmp_path / "d"), "--listen", f"127.0.0.1:{free_port()}",
                    "--set", f"zookeeper.connect=127.0.0.1:{port}", "--set", "zookeeper.connection.timeout.ms=2000"])
    assert result.returncode == 1
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
