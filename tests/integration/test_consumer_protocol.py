"""What only the consumer group protocol (KIP-848, ``group.protocol=consumer``)
has, against the real broker with librdkafka 2.16 (members sharing a topic,
hand-over when one closes or dies, and a static member's restart are in
test_groups.py, for both protocols): the broker is stopped and killed under
a member that commits as it reads, and the member joins again; the admin
client and ``hpbroker groups`` describe and list such a group; the console
consumer joins one; a regex subscription takes a topic made later; and a
classic member is kept out of such a group."""

import json
import signal

import confluent_kafka as ck
import kafka
import kafka.errors
import pytest
from confluent_kafka.admin import AdminClient

from harness.waiting import wait_for
from tests.integration.conftest import module_broker
from tests.integration.test_cli_admin import ok, table_rows
from tests.integration.test_groups import PARTITIONS, Members, make_topic, produce

SESSION_MS = 4000  # the coordinator's, for this protocol: members do not choose it
SETTINGS = {"group.consumer.session.timeout.ms": str(SESSION_MS), "group.consumer.heartbeat.interval.ms": "500"}
broker = module_broker(SETTINGS)


def member(bootstrap: str, group: str, topic: str, **conf) -> ck.Consumer:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
                     "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 2000, **conf})
    c.subscribe([topic])
    return c


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_a_member_carries_on_across_a_broker_restart(broker_factory, how):
    """The coordinator forgets the group's members when it stops (only offsets
    are kept): the member is told it is unknown, joins again, and reads on
    from its last commit."""
    b = broker_factory(SETTINGS)
    topic = make_topic(b.bootstrap, "kip848-restart")
    group = topic + "-g"
    produce(b.bootstrap, topic, 0, 600)
    c = member(b.bootstrap, group, topic, **{"enable.auto.commit": False})
    members = Members([c])
    try:
        members.until(lambda: len(members.all_values()) >= 300, 30, "the first records")
        c.commit(asynchronous=False)
        committed = len(members.all_values())
        if how == signal.SIGKILL:
            b.kill()
            b.start()
        else:
            b.restart()
        produce(b.bootstrap, topic, 600, 60)
        members.until(lambda: set(members.all_values()) >= set(range(660)), 60, "every record after the restart")
        again = len(members.all_values()) - 660  # read twice: only what came after the last commit
        assert 0 <= again <= 600 - committed + 60, (committed, again)
        c.commit(asynchronous=False)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        offsets = admin.list_consumer_group_offsets([ck.ConsumerGroupTopicPartitions(group)])[group].result(10)
        assert sum(tp.offset for tp in offsets.topic_partitions) == 660
    finally:
        c.close()


def test_the_admin_client_describes_and_lists_the_group(broker):
    topic = make_topic(broker.bootstrap, "kip848-admin")
    group = topic + "-g"
    members = Members([member(broker.bootstrap, group, topic, **{"client.id": "kip848-client"}) for _ in range(2)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        members.until(members.balanced, 30, "two members to share the topic")

        def stable():
            described = admin.describe_consumer_groups([group])[group].result(10)
            return described if described.state == ck.ConsumerGroupState.STABLE else None
        described = wait_for(stable, 20, "the group to be Stable")
        assert described.type == ck.ConsumerGroupType.CONSUMER and described.partition_assignor == "uniform"
        assert {m.client_id for m in described.members} == {"kip848-client"}
        held = sorted(tp.partition for m in described.members for tp in m.assignment.topic_partitions)
        assert held == list(range(PARTITIONS))
        listed = admin.list_consumer_groups(types={ck.ConsumerGroupType.CONSUMER}).result(10).valid
        assert group in {g.group_id for g in listed}
        classic = admin.list_consumer_groups(types={ck.ConsumerGroupType.CLASSIC}).result(10).valid
        assert group not in {g.group_id for g in classic}
        shown = json.loads(ok("groups", "describe", group, "--json", broker=broker))[0]
        assert (shown["type"], shown["state"], shown["assignor"], len(shown["members"])) == (
            "Consumer", "Stable", "uniform", 2)
        assert sorted(p["partition"] for p in shown["partitions"] if p["consumer_id"]) == list(range(PARTITIONS))
        assert [group, "Consumer", "Stable"] in table_rows(ok("groups", "list", broker=broker))
    finally:
        members.close()


def test_the_console_consumer_joins_with_the_consumer_protocol(broker):
    topic = make_topic(broker.bootstrap, "kip848-cli")
    group = topic + "-g"
    produce(broker.bootstrap, topic, 0, 12)
    printed = ok("consume", topic, "--group", group, "--command-config", "group.protocol=consumer",
                 "--from-beginning", "--max-messages", "12", broker=broker)
    assert sorted(map(int, printed.split())) == list(range(12))
    assert [group, "Consumer", "Empty"] in table_rows(ok("groups", "list", broker=broker))
    shown = json.loads(ok("groups", "describe", group, "--json", broker=broker))[0]
    assert sum(p["committed_offset"] for p in shown["partitions"]) == 12  # it committed as it went


def test_a_regex_subscription_takes_a_topic_created_later(broker):
    first = make_topic(broker.bootstrap, "kip848-rx")
    prefix = first.rsplit("-", 1)[0]
    group = first + "-g"
    members = Members([member(broker.bootstrap, group, f"^{prefix}-.*")])
    try:
        produce(broker.bootstrap, first, 0, 30)
        members.until(lambda: len(members.all_values()) >= 30, 30, "the first topic's records")
        second = make_topic(broker.bootstrap, prefix)  # the same prefix, a new suffix: it matches
        assert second != first
        produce(broker.bootstrap, second, 30, 30)
        members.until(lambda: len(members.all_values()) >= 60, 30, "the new topic's records, within a heartbeat")
        assert members.all_values() == list(range(60))
    finally:
        members.close()


def test_a_classic_member_cannot_join_a_consumer_group_with_members(broker):
    topic = make_topic(broker.bootstrap, "kip848-mixed")
    group = topic + "-g"
    members = Members([member(broker.bootstrap, group, topic)])
    classic = kafka.KafkaConsumer(topic, bootstrap_servers=broker.bootstrap, group_id=group,
                                  auto_offset_reset="earliest", session_timeout_ms=6000, heartbeat_interval_ms=500)
    try:
        members.until(members.balanced, 30, "the member to hold the topic")
        with pytest.raises(kafka.errors.InconsistentGroupProtocolError):
            classic.poll(timeout_ms=10_000)
    finally:
        classic.close()
        members.close()
