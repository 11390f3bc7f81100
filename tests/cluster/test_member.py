"""A broker's membership: joining, refusals, image hand-over, controlled shutdown."""


import pytest

from harness.broker import free_port
from harness.waiting import wait_for
from hpbroker.cluster import session, znodes
from hpbroker.cluster.member import ClusterJoinError, ClusterMember, MemberSettings

WAIT_S = 20


@pytest.fixture
def members(chroot):
    made = []

    def make(broker_id=None, stored=(None, None), new_cluster_id="cluster-a", **kw):
        member = ClusterMember(MemberSettings(chroot, 4000, 10000, broker_id=broker_id, port=19000 + (broker_id or 0),
                                              **kw))
        made.append(member)
        stored_broker_id, stored_cluster_id = stored
        member.join(stored_broker_id, stored_cluster_id, new_cluster_id)
        return member

    yield make
    for member in made:
        member.close()


def test_join_registers_and_the_image_follows(members):
    first = members(1)
    assert (first.broker_id, first.cluster_id) == (1, "cluster-a")
    wait_for(lambda: first.registered, WAIT_S, "registration")
    members(2, new_cluster_id="ignored")
    wait_for(lambda: set(first.image().brokers) == {1, 2}, WAIT_S, "both brokers in the image")
    assert first.image().cluster_id == "cluster-a"


def test_refusals_are_one_line_reasons(members):
    members(1)
    with pytest.raises(ClusterJoinError, match="broker.id 1 is registered by another live broker"):
        members(1)
    with pytest.raises(ClusterJoinError, match="belong to cluster other"):
        members(3, stored=(3, "other"))
    with pytest.raises(ClusterJoinError, match="does not match broker.id 4 in meta.properties"):
        members(5, stored=(4, "cluster-a"))
    with pytest.raises(ClusterJoinError, match="generation.enable is false"):
        members(None, generate_broker_id=False)
    with pytest.raises(ClusterJoinError, match="within 1000 ms"):
        ClusterMember(MemberSettings(f"127.0.0.1:{free_port()}", 4000, 1000, broker_id=9)).join(None, None, "x")


def test_ids_come_from_meta_properties_or_zookeeper(members):
    assert members(None, stored=(7, None)).broker_id == 7
    generated = members(None).broker_id
    assert generated > 1000


def test_controlled_shutdown_moves_leadership_away(members, chroot):
    one, two = members(1), members(2)
    admin = session.connect(chroot, 4000, 10000)
    try:
        admin.create(znodes.topic_path("t"), znodes.TopicAssignment("t", {0: [1, 2], 1: [2, 1]}).encode())
        wait_for(lambda: len(one.image().states) == 2, WAIT_S, "partition states")
        assert one.controlled_shutdown(WAIT_S)
        assert all(s.leader == 2 for s in one.image().states.values())
        wait_for(lambda: all(s.leader == 2 and s.isr == [2] for s in two.image().states.values()), WAIT_S,
                 "broker 1 out of every ISR")
    finally:
        session.close(admin)
