"""The ``cluster`` fixture: three real brokers (harness.cluster.Cluster) on the
test ZooKeeper, under this test's own chroot.  A test module takes it with
``from tests.cluster.brokers import cluster``."""

import pytest

from harness.cluster import Cluster


@pytest.fixture
def cluster(zookeeper, chroot, tmp_path):
    """Three brokers with min.insync.replicas=2, started; all killed at the end."""
    found = Cluster(chroot, tmp_path, 3, overrides={"min.insync.replicas": "2"})
    found.start_all()
    yield found
    found.close()
