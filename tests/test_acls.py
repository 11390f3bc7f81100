"""The ACL authorizer's decisions as Kafka's AclAuthorizer makes them, the
filters of DescribeAcls and DeleteAcls, the standalone ACL file, and
ZooKeeper's JSON form of a resource's ACLs."""

import asyncio
import json

import pytest

from hpbroker.cluster import znodes
from hpbroker.security.acl_store import ACLS_FILE, AclStoreError, FileAcls
from hpbroker.security.acls import (
    AclError,
    Binding,
    Entry,
    Filter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
    decode_entries,
    encode_entries,
    operation_named,
    resource_type_named,
    validated,
)
from hpbroker.security.authorizer import Authorizer, all_operations, parse_super_users
from hpbroker.shared.counters import TopicChanges, WriterCounters
from hpbroker.workers.authorization import acl_host

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = Permission.ALLOW, Permission.DENY
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED


def acls(*bindings: tuple) -> dict:
    """(kind, name, pattern, principal, host, operation, permission) tuples as the store's mapping."""
    found: dict = {}
    for kind, name, pattern, principal, host, op, permission in bindings:
        resource = Resource(kind, name, pattern)
        found[resource] = found.get(resource, frozenset()) | {Entry(principal, host, op, permission)}
    return found


def authorizer(*bindings, super_users=(), allow_if_no_acl=False) -> Authorizer:
    a = Authorizer(frozenset(super_users), allow_if_no_acl)
    a.load(acls(*bindings), 1)
    return a


def test_a_resource_without_acls_is_closed_unless_allow_everyone_is_set():
    assert not authorizer().allowed("User:alice", "10.0.0.1", Operation.READ, TOPIC, "t")
    assert authorizer(allow_if_no_acl=True).allowed("User:alice", "10.0.0.1", Operation.READ, TOPIC, "t")


def test_any_acl_on_the_resource_closes_it_to_everyone_else_even_with_allow_everyone():
    a = authorizer((TOPIC, "t", LITERAL, "User:bob", "*", Operation.READ, ALLOW), allow_if_no_acl=True)
    assert a.allowed("User:bob", "1.2.3.4", Operation.READ, TOPIC, "t")
    assert not a.allowed("User:alice", "1.2.3.4", Operation.READ, TOPIC, "t")
    assert not a.allowed("User:bob", "1.2.3.4", Operation.WRITE, TOPIC, "t")
    assert a.allowed("User:alice", "1.2.3.4", Operation.READ, TOPIC, "other")  # no ACL there


def test_literal_wildcard_and_prefixed_patterns_apply_to_a_name():
    a = authorizer((TOPIC, "orders", LITERAL, "User:a", "*", Operation.READ, ALLOW),
                   (TOPIC, "*", LITERAL, "User:b", "*", Operation.READ, ALLOW),
                   (TOPIC, "ord", PREFIXED, "User:c", "*", Operation.READ, ALLOW),
                   (TOPIC, "*", PREFIXED, "User:d", "*", Operation.READ, ALLOW))
    for principal in ("User:a", "User:b", "User:c"):
        assert a.allowed(principal, "h", Operation.READ, TOPIC, "orders"), principal
    assert not a.allowed("User:a", "h", Operation.READ, TOPIC, "ordersX")
    assert a.allowed("User:c", "h", Operation.READ, TOPIC, "ord")  # a prefix as long as the name
    assert not a.allowed("User:c", "h", Operation.READ, TOPIC, "or")
    assert not a.allowed("User:d", "h", Operation.READ, TOPIC, "orders")  # a prefixed '*' is only a '*' prefix
    assert a.allowed("User:d", "h", Operation.READ, TOPIC, "*x")
    assert not a.allowed("User:a", "h", Operation.READ, GROUP, "orders")  # another type


def test_deny_wins_and_implied_operations_come_from_allows_only():
    a = authorizer((TOPIC, "t", LITERAL, "User:*", "*", Operation.ALL, ALLOW),
                   (TOPIC, "t", LITERAL, "User:eve", "10.0.0.9", Operation.WRITE, DENY),
                   (TOPIC, "u", LITERAL, "User:bob", "*", Operation.WRITE, ALLOW),
                   (TOPIC, "u", LITERAL, "User:bob", "*", Operation.READ, DENY),
                   (TOPIC, "v", LITERAL, "User:bob", "*", Operation.ALTER_CONFIGS, ALLOW))
    assert a.allowed("User:eve", "10.0.0.1", Operation.WRITE, TOPIC, "t")  # denied from another host only
    assert not a.allowed("User:eve", "10.0.0.9", Operation.WRITE, TOPIC, "t")
    assert a.allowed("User:eve", "10.0.0.9", Operation.READ, TOPIC, "t")
    assert a.allowed("User:bob", "h", Operation.DESCRIBE, TOPIC, "u")  # WRITE implies DESCRIBE
    assert not a.allowed("User:bob", "h", Operation.READ, TOPIC, "u")
    assert a.allowed("User:bob", "h", Operation.DESCRIBE_CONFIGS, TOPIC, "v")
    assert not a.allowed("User:bob", "h", Operation.DESCRIBE, TOPIC, "v")


def test_super_users_may_do_anything_even_where_denied():
    assert parse_super_users(" User:admin ; User:CN=broker,O=x;;") == {"User:admin", "User:CN=broker,O=x"}
    a = authorizer((TOPIC, "t", LITERAL, "User:admin", "*", Operation.ALL, DENY), super_users={"User:admin"})
    assert a.allowed("User:admin", "h", Operation.WRITE, TOPIC, "t")
    assert a.allowed("User:admin", "h", Operation.ALTER, CLUSTER, "kafka-cluster")


def test_unreadable_acls_deny_everyone_but_the_super_users():
    a = authorizer((TOPIC, "t", LITERAL, "User:a", "*", Operation.ALL, ALLOW), super_users={"User:admin"},
                   allow_if_no_acl=True)
    a.fail_closed()
    assert not a.allowed("User:a", "h", Operation.READ, TOPIC, "t")
    assert not a.allowed("User:a", "h", Operation.READ, TOPIC, "no-acls-here")
    assert a.allowed("User:admin", "h", Operation.READ, TOPIC, "t")
    a.load({}, 2)
    assert a.allowed("User:a", "h", Operation.READ, TOPIC, "t")


def test_a_new_load_is_decided_afresh():
    a = authorizer((TOPIC, "t", LITERAL, "User:a", "*", Operation.READ, ALLOW))
    assert a.allowed("User:a", "h", Operation.READ, TOPIC, "t")
    a.load(acls((TOPIC, "t", LITERAL, "User:a", "*", Operation.READ, DENY)), 2)
    assert not a.allowed("User:a", "h", Operation.READ, TOPIC, "t")


def test_writing_some_topic_is_an_allow_no_deny_covers():
    """InitProducerId's test for an idempotent producer (Kafka's authorizeByResourceType)."""
    some = Operation.WRITE
    assert authorizer((TOPIC, "t", LITERAL, "User:a", "*", some, ALLOW)).allowed_on_some("User:a", "h", some, TOPIC)
    assert authorizer((TOPIC, "p-", PREFIXED, "User:*", "*", some, ALLOW)).allowed_on_some("User:a", "h", some, TOPIC)
    assert not authorizer((TOPIC, "t", LITERAL, "User:a", "*", some, ALLOW),
                          (TOPIC, "t", LITERAL, "User:a", "*", some, DENY)).allowed_on_some("User:a", "h", some, TOPIC)
    assert not authorizer((TOPIC, "pay", LITERAL, "User:a", "*", some, ALLOW),
                          (TOPIC, "pa", PREFIXED, "User:a", "*", some, DENY)).allowed_on_some("User:a", "h", some,
                                                                                              TOPIC)
    assert not authorizer((TOPIC, "t", LITERAL, "User:a", "*", some, ALLOW),
                          (TOPIC, "*", LITERAL, "User:a", "*", Operation.ALL, DENY)).allowed_on_some(
        "User:a", "h", some, TOPIC)
    assert not authorizer((TOPIC, "t", LITERAL, "User:b", "*", some, ALLOW)).allowed_on_some("User:a", "h", some,
                                                                                              TOPIC)
    assert not authorizer((TOPIC, "t", LITERAL, "User:a", "*", Operation.READ, ALLOW)).allowed_on_some(
        "User:a", "h", some, TOPIC)


def test_authorized_operations_bit_fields():
    assert all_operations(TOPIC) == 3576 and all_operations(CLUSTER) == 8096 and all_operations(GROUP) == 328
    a = authorizer((TOPIC, "t", LITERAL, "User:a", "*", Operation.WRITE, ALLOW))
    assert a.operations("User:a", "h", TOPIC, "t") == (1 << Operation.WRITE) | (1 << Operation.DESCRIBE)


def binding(kind=TOPIC, name="t", pattern=LITERAL, principal="User:a", host="*", op=Operation.READ,
            permission=ALLOW) -> Binding:
    return Binding(Resource(kind, name, pattern), Entry(principal, host, op, permission))


def test_filters_pick_as_kafka_does():
    literal, wildcard, prefix = binding(name="orders"), binding(name="*"), binding(name="ord", pattern=PREFIXED)
    everything = Filter()
    assert all(everything.matches(b) for b in (literal, wildcard, prefix))
    match = Filter(TOPIC, "orders", PatternType.MATCH)
    assert match.matches(literal) and match.matches(wildcard) and match.matches(prefix)
    assert not match.matches(binding(name="orders2"))
    any_named = Filter(TOPIC, "orders", PatternType.ANY)
    assert any_named.matches(literal) and not any_named.matches(wildcard) and not any_named.matches(prefix)
    assert Filter(principal="User:a").matches(literal)
    assert not Filter(principal="User:a").matches(binding(principal="User:*"))  # exact, as Kafka compares
    assert not Filter(operation=Operation.WRITE).matches(literal)
    assert Filter(permission=ALLOW).matches(literal) and not Filter(permission=DENY).matches(literal)
    with pytest.raises(AclError):
        Filter(kind=ResourceType.UNKNOWN).check()


@pytest.mark.parametrize("bad, why", [
    (binding(kind=ResourceType.ANY), "cannot carry"),
    (binding(pattern=PatternType.MATCH), "LITERAL or PREFIXED"),
    (binding(name=""), "name is needed"),
    (binding(kind=CLUSTER, name="mine", op=Operation.ALTER), "kafka-cluster"),
    (binding(permission=Permission.ANY), "neither ALLOW nor DENY"),
    (binding(kind=GROUP, op=Operation.WRITE), "does not apply"),
    (binding(principal="alice"), "Type:name"),
    (binding(name="*", pattern=PREFIXED), "prefixed resource cannot be '*'"),
])
def test_creations_kafka_refuses_are_refused(bad, why):
    with pytest.raises(AclError, match=why):
        validated(bad)


def test_names_are_read_as_kafka_spells_them():
    assert operation_named("DescribeConfigs") is Operation.DESCRIBE_CONFIGS
    assert operation_named("describe_configs") is Operation.DESCRIBE_CONFIGS
    assert operation_named("READ") is Operation.READ
    assert resource_type_named("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    with pytest.raises(AclError, match="no operation named 'Fly'"):
        operation_named("Fly")


def test_zookeeper_json_is_kafkas():
    entries = {Entry("User:alice", "*", Operation.READ, ALLOW), Entry("User:bob", "10.0.0.1", Operation.ALL, DENY)}
    document = json.loads(encode_entries(entries))
    assert document["version"] == 1
    assert {"principal": "User:alice", "permissionType": "Allow", "operation": "Read", "host": "*"} \
        in document["acls"]
    assert {"principal": "User:bob", "permissionType": "Deny", "operation": "All", "host": "10.0.0.1"} \
        in document["acls"]
    assert decode_entries(encode_entries(entries)) == entries
    # as Kafka's own authorizer writes it, with every operation's name
    kafka = b'{"version":1,"acls":[{"principal":"User:x","permissionType":"Allow","operation":"IdempotentWrite",' \
            b'"host":"*"}]}'
    assert decode_entries(kafka) == {Entry("User:x", "*", Operation.IDEMPOTENT_WRITE, ALLOW)}
    with pytest.raises(AclError):
        decode_entries(b"[1, 2]")
    assert znodes.acl_path("Topic", "orders", False) == "/kafka-acl/Topic/orders"
    assert znodes.acl_path("Group", "g-", True) == "/kafka-acl-extended/prefixed/Group/g-"
    assert znodes.acl_change("TOPIC", "orders", False) == ("/kafka-acl-changes", b"TOPIC:orders")
    parent, note = znodes.acl_change("TRANSACTIONAL_ID", "tx-", True)
    assert parent == "/kafka-acl-extended-changes"
    assert json.loads(note) == {"version": 1, "resourceType": "TRANSACTIONAL_ID", "name": "tx-",
                                "patternType": "PREFIXED"}


def test_the_standalone_file_is_changed_by_every_worker_and_read_by_all(tmp_path):
    counters = WriterCounters(2)
    first, second = (FileAcls(str(tmp_path / ACLS_FILE), TopicChanges(counters, i)) for i in range(2))
    before = counters.stamp()
    asyncio.run(first.add([binding(name="a"), binding(name="b", pattern=PREFIXED)]))
    assert counters.stamp() != before
    asyncio.run(second.add([binding(name="a", principal="User:z")]))
    assert second.read() == first.read() == acls(
        (TOPIC, "a", LITERAL, "User:a", "*", Operation.READ, ALLOW),
        (TOPIC, "a", LITERAL, "User:z", "*", Operation.READ, ALLOW),
        (TOPIC, "b", PREFIXED, "User:a", "*", Operation.READ, ALLOW))
    removed = asyncio.run(first.remove([Filter(TOPIC, "a", PatternType.ANY, principal="User:a"), Filter(name="x")]))
    assert removed == [[binding(name="a")], []]
    assert Resource(TOPIC, "a", LITERAL) in first.read()
    asyncio.run(first.remove([Filter()]))
    assert first.read() == {}
    (tmp_path / ACLS_FILE).write_text("not json")
    with pytest.raises(AclStoreError, match="cannot read"):
        first.read()


def test_client_addresses_are_written_as_kafkas_acls_name_hosts():
    assert acl_host("10.0.0.1") == "10.0.0.1"
    assert acl_host("::1") == "0:0:0:0:0:0:0:1"
    assert acl_host("fe80::1%eth0") == "fe80:0:0:0:0:0:0:1"
    assert acl_host("::ffff:10.0.0.7") == "10.0.0.7"
