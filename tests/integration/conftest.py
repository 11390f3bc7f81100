"""Fixtures that run the real broker: ``broker`` (one per test module) and
``broker_factory`` (per test, for tests that restart, kill or reconfigure it).
When a test fails, the broker's stderr is attached to the report."""

import pytest

from harness.broker import Broker


class BrokerFactory:
    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.brokers: list[Broker] = []

    def __call__(self, overrides: dict | None = None, start: bool = True, data_dir=None, **kw) -> Broker:
        n = len(self.brokers)
        b = Broker(data_dir or self.tmp_path / f"data{n}", self.tmp_path / f"broker{n}.log", overrides, **kw)
        self.brokers.append(b)
        return b.start() if start else b

    def close(self) -> None:
        for b in self.brokers:
            if b.proc is not None and b.proc.poll() is None:
                b.stop()  # asserts a clean exit: a broker that cannot stop fails the test


def module_broker(overrides: dict | None = None):
    """A module-scoped broker fixture with these settings; a test module
    overrides ``broker`` with ``broker = module_broker({...})``."""

    @pytest.fixture(scope="module")
    def fixture(tmp_path_factory):
        b = Broker(tmp_path_factory.mktemp("broker") / "data", overrides=overrides).start()
        yield b
        b.stop()

    return fixture


broker = module_broker()


@pytest.fixture
def broker_factory(tmp_path):
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.close()


def _brokers_of(item) -> list[Broker]:
    found = []
    for value in getattr(item, "funcargs", {}).values():
        if isinstance(value, Broker):
            found.append(value)
        elif isinstance(value, BrokerFactory):
            found.extend(value.brokers)
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for i, b in enumerate(_brokers_of(item)):
            report.sections.append((f"broker {i} stderr ({b.log_path})", b.log_tail(80)))
