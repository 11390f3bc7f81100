"""The fixtures of tests/cluster/, found by pytest without an import:

* ``zookeeper`` (one server per module) and ``chroot`` (a connect string of
  this test's own under it);
* ``start_members`` (``start_members(1, 2, 3)``: ZooKeeper members without a
  data plane, tests.cluster.members) and ``admin`` (a plain client reading and
  writing znodes as an operator would);
* ``cluster``: three real brokers (harness.cluster.Cluster) on that ZooKeeper;
* ``netlab`` (a fresh tests.cluster.netlab.NetLab) and ``lab_cluster``
  (ZooKeeper and three brokers on hosts of a lab, tests.cluster.lab_cluster)."""

import pytest

from harness.cluster import Cluster
from harness.zookeeper import ZooKeeperServer
from hpbroker.cluster import registration, session
from hpbroker.cluster.controller import ControllerSettings
from tests.cluster.lab_cluster import LabCluster
from tests.cluster.members import SESSION_MS, Member
from tests.cluster.netlab import NetLab


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory):
    """One ZooKeeper server per test module; tests keep apart by chroot."""
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.stop()


@pytest.fixture
def chroot(request, zookeeper):
    """A connect string with a chroot of this test's own."""
    return f"{zookeeper.connect}/{request.node.name.replace('[', '-').replace(']', '')}"


@pytest.fixture
def start_members(chroot):
    """``start_members(*ids, settings=...)`` starts a member per broker id and
    returns every member started so far (by id); those still alive leave at the end."""
    members: dict[int, Member] = {}

    def start(*ids, settings=ControllerSettings()):
        for broker_id in ids:
            members[broker_id] = Member(chroot, broker_id, settings)
        return members

    yield start
    for member in members.values():
        member.leave()


@pytest.fixture
def admin(chroot):
    client = session.connect(chroot, SESSION_MS, 10000)
    registration.ensure_layout(client)
    yield client
    session.close(client)


@pytest.fixture
def cluster(zookeeper, chroot, tmp_path):
    """Three brokers with min.insync.replicas=2, started; all killed at the end."""
    found = Cluster(chroot, tmp_path, 3, overrides={"min.insync.replicas": "2"})
    found.start_all()
    yield found
    found.close()


@pytest.fixture
def netlab():
    """A fresh NetLab, deleted (with whatever runs in it) after the test."""
    with NetLab() as lab:
        yield lab


@pytest.fixture
def lab_cluster(netlab, tmp_path):
    """ZooKeeper and three brokers on hosts of a fresh lab, started; all killed at the end."""
    found = LabCluster(netlab, tmp_path)
    try:
        found.start_all()
        yield found
    finally:
        found.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report carries the tail of each of its clusters' broker logs."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for name, value in getattr(item, "funcargs", {}).items():
            if isinstance(value, Cluster):
                report.sections.append((f"{name}: broker logs", value.logs(60)))
