import pytest

from harness.zookeeper import ZooKeeperServer


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
