"""What an authorization decision costs a request, in process.

    .venv/bin/python -m pytest bench/test_bench_authorizer.py --benchmark-only

* A worker's check as a handler makes it (``ctx.access.topic``): the
  principal and host from the connection's context, the standalone change
  counters compared, the answer from the cache; against the same call with
  no authorizer (what every request pays when none is set).
* The decision itself, uncached (a topic name not asked about before),
  among 1,000 and 10,000 ACLs: literal names, prefixes and wildcards
  of several principals, as ``bench/acl_cost.py`` loads a broker with.
"""

import itertools

import pytest

from hpbroker.security.acls import Entry, Operation, PatternType, Permission, Resource, ResourceType
from hpbroker.security.authorizer import Authorizer
from hpbroker.shared.counters import TopicChanges, WriterCounters
from hpbroker.workers.authorization import Access, file_refresh
from hpbroker.workers.client_identity import CLIENT_HOST, CLIENT_IP

TOPIC = "orders"


def _acls(count: int) -> dict:
    acls: dict = {Resource(ResourceType.TOPIC, TOPIC): frozenset(
        {Entry("User:ANONYMOUS", "*", Operation.WRITE, Permission.ALLOW)})}
    for i in range(count - 1):
        pattern = PatternType.PREFIXED if i % 3 == 0 else PatternType.LITERAL
        resource = Resource(ResourceType.TOPIC, f"other-{i}", pattern)
        acls[resource] = frozenset({Entry(f"User:user-{i % 50}", "*", Operation.READ, Permission.ALLOW)})
    acls[Resource(ResourceType.TOPIC, "ord", PatternType.PREFIXED)] = frozenset(
        {Entry("User:reader", "*", Operation.READ, Permission.ALLOW)})
    return acls


class _File:
    """The standalone store, as the worker's refresh reads it."""

    def __init__(self, acls):
        self.acls = acls

    def read(self):
        return self.acls


def _access(count: int) -> Access:
    store = _File(_acls(count))
    changes = TopicChanges(WriterCounters(2), 0)
    return Access(Authorizer(), file_refresh(store, changes))


@pytest.mark.parametrize("authorizer", ["none", "acls-1000"])
def test_a_handlers_check(benchmark, authorizer):
    access = Access() if authorizer == "none" else _access(1000)
    CLIENT_HOST.set("/127.0.0.1")
    CLIENT_IP.set("127.0.0.1")  # as the connection sets it
    assert access.topic(Operation.WRITE, TOPIC)
    benchmark(access.topic, Operation.WRITE, TOPIC)


@pytest.mark.parametrize("count", [1000, 10000])
def test_an_uncached_decision(benchmark, count):
    authorizer = Authorizer()
    authorizer.load(_acls(count), 1)

    names = itertools.count()

    def decide() -> bool:  # a name not asked about before: never in the cache
        return authorizer.allowed("User:reader", "127.0.0.1", Operation.READ, ResourceType.TOPIC,
                                  f"orders-{next(names)}")
    assert decide()
    benchmark(decide)
