"""The controller against a real ZooKeeper: brokers here are real ZooKeeper
members (session, registration, image watcher, controller) without a data
plane, so leadership and ISR decisions can be driven and read exactly."""

import dataclasses

from harness.waiting import wait_for
from hpbroker.cluster import session, znodes
from hpbroker.cluster.controller import Controller, ControllerSettings
from hpbroker.cluster.watcher import ImageWatcher
from tests.cluster.members import SESSION_MS, WAIT_S, controller_of, create_topic, state, wait_state


def test_one_controller_and_a_new_epoch_on_each_takeover(start_members, admin, chroot):
    members = start_members(1, 2, 3)

    def active() -> int | None:
        """The one live member acting as controller, once it has bumped the epoch
        (a winner writes /controller first and the epoch after it)."""
        acting = [i for i, m in members.items() if m.alive and m.controller.active]
        return acting[0] if len(acting) == 1 else None

    first = wait_for(active, WAIT_S, "a controller")
    assert sum(m.controller.active for m in members.values()) == 1
    _, epoch = controller_of(admin)
    members[first].crash(chroot)
    second = wait_for(lambda: (i := active()) not in (None, first) and i, WAIT_S, "another broker to take over")
    assert controller_of(admin) == (second, epoch + 1)
    members[second].leave()  # a clean stop resigns at once
    third = wait_for(lambda: (i := active()) not in (None, first, second) and i, WAIT_S,
                     "the last broker to take over")
    assert controller_of(admin) == (third, epoch + 2)


def test_new_topics_get_leaders_and_a_dead_leader_is_replaced_from_the_isr(start_members, admin, chroot):
    members = start_members(1, 2, 3)
    assignment = {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    create_topic(admin, "orders", assignment)
    for p, replicas in assignment.items():
        found = wait_state(admin, "orders", p, "partition states", lambda s: True)
        assert (found.leader, found.leader_epoch, found.isr) == (replicas[0], 0, replicas)
    members[2].crash(chroot)
    moved = wait_state(admin, "orders", 1, "partition 1 to get a new leader", lambda s: s.leader != 2)
    assert moved.leader == 3 and moved.leader_epoch == 1 and 2 not in moved.isr
    kept = wait_state(admin, "orders", 0, "broker 2 to leave partition 0's ISR", lambda s: 2 not in s.isr)
    assert kept.leader == 1 and kept.leader_epoch == 0


def test_a_partition_whose_isr_is_all_gone_waits_for_its_last_in_sync_replica(start_members, admin, chroot):
    members = start_members(1, 2)
    create_topic(admin, "t", {0: [1, 2]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1)
    # broker 2 drops out of the ISR (as a lagging follower would be shrunk out)
    current = state(admin, "t", 0)
    assert current is not None
    admin.set(znodes.partition_state_path("t", 0),
              znodes.PartitionState(1, current.leader_epoch, [1], current.controller_epoch).encode(),
              version=current.zk_version)
    members[1].crash(chroot)
    offline = wait_state(admin, "t", 0, "the partition to go offline", lambda s: s.leader == -1)
    assert offline.isr == [1] and offline.leader_epoch == 1  # 2 is out of sync: not elected
    start_members(1)
    back = wait_state(admin, "t", 0, "broker 1 to lead again", lambda s: s.leader == 1)
    assert back.leader_epoch == 2


def test_a_broker_that_registered_again_unseen_is_out_of_every_isr_and_leads_no_more(start_members, admin):
    """Its registration is replaced in one ZooKeeper transaction, so the
    controller's watches never see it go (as when a restarted broker registers
    the moment its predecessor's session ends): its new broker epoch alone
    says it is another incarnation, which nothing shows to hold what the ISR
    promised (it may have restarted on an empty disk)."""
    start_members(1, 2, 3)
    create_topic(admin, "t", {0: [1, 2, 3], 1: [2, 1, 3]})
    wait_state(admin, "t", 0, "partition 0's state", lambda s: s.isr == [1, 2, 3])
    before = wait_state(admin, "t", 1, "broker 2 to lead partition 1", lambda s: s.leader == 2)
    path = znodes.broker_path(2)
    data, _stat = admin.get(path)
    bounce = admin.transaction()
    bounce.delete(path)
    bounce.create(path, data, ephemeral=True)
    assert not any(isinstance(r, Exception) for r in bounce.commit())
    kept = wait_state(admin, "t", 0, "broker 2 to leave partition 0's ISR", lambda s: 2 not in s.isr)
    assert (kept.leader, kept.isr) == (1, [1, 3])
    moved = wait_state(admin, "t", 1, "partition 1 to get another leader", lambda s: s.leader != 2)
    assert moved.leader == 1 and moved.leader_epoch == before.leader_epoch + 1 and 2 not in moved.isr


def test_unclean_election_lets_an_out_of_sync_replica_lead(start_members, admin, chroot):
    members = start_members(1, 2, settings=ControllerSettings(unclean_leader_election=True))
    create_topic(admin, "t", {0: [1, 2]})
    current = wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1)
    admin.set(znodes.partition_state_path("t", 0),
              znodes.PartitionState(1, 0, [1], current.controller_epoch).encode(), version=current.zk_version)
    members[1].crash(chroot)
    found = wait_state(admin, "t", 0, "broker 2 to lead", lambda s: s.leader == 2)
    assert found.isr == [2]


def test_controlled_shutdown_moves_leadership_before_the_broker_leaves(start_members, admin):
    members = start_members(1, 2, 3)
    create_topic(admin, "t", {0: [1, 2, 3], 1: [1, 3, 2]})
    wait_state(admin, "t", 1, "leaders", lambda s: s.leader == 1)
    members[1].client.create(znodes.controlled_shutdown_path(1), ephemeral=True)
    for p, successor in ((0, 2), (1, 3)):
        moved = wait_state(admin, "t", p, "leadership to move off broker 1", lambda s: s.leader != 1)
        assert moved.leader == successor and 1 not in moved.isr
    assert members[1].registration.registered.is_set()  # still running: it left nothing offline


def test_deleting_a_topic_removes_its_znodes(start_members, admin):
    start_members(1)
    create_topic(admin, "gone", {0: [1], 1: [1]})
    admin.create(znodes.topic_config_path("gone"), znodes.encode_topic_config({"retention.ms": "1"}))
    wait_state(admin, "gone", 1, "states", lambda s: True)
    admin.create(f"{znodes.DELETE_TOPICS}/gone")
    wait_for(lambda: not admin.exists(znodes.topic_path("gone")) and not admin.get_children(znodes.DELETE_TOPICS),
             WAIT_S, "the topic to be deleted")
    assert not admin.exists(znodes.topic_config_path("gone"))


def test_preferred_replica_election_on_request(start_members, admin, chroot):
    members = start_members(1, 2)
    create_topic(admin, "t", {0: [1, 2]})
    wait_state(admin, "t", 0, "a leader", lambda s: s.leader == 1 and s.isr == [1, 2])
    members[1].crash(chroot)
    wait_state(admin, "t", 0, "broker 2 to lead", lambda s: s.leader == 2)
    start_members(1)
    # broker 1 is back in sync (what its follower fetches would achieve)
    current = state(admin, "t", 0)
    assert current is not None
    admin.set(znodes.partition_state_path("t", 0),
              znodes.PartitionState(2, current.leader_epoch, [2, 1], current.controller_epoch).encode(),
              version=current.zk_version)
    admin.create(znodes.PREFERRED_REPLICA_ELECTION, znodes.encode_preferred_election([("t", 0)]))
    back = wait_state(admin, "t", 0, "the preferred replica to lead", lambda s: s.leader == 1)
    assert back.leader_epoch == current.leader_epoch + 1
    wait_for(lambda: not admin.exists(znodes.PREFERRED_REPLICA_ELECTION), WAIT_S, "the request to be taken")


def test_a_replaced_controller_cannot_write(start_members, admin):
    """Once /controller_epoch has moved past its term (as when another broker
    took over while this one was paused) a controller's writes fail: nothing
    is written under the old epoch.  Still holding /controller, it gives the
    znode up and stands again, so the cluster is not left without a controller."""
    members = start_members(1)
    wait_for(lambda: members[1].controller.active, WAIT_S, "broker 1 to be controller")
    data, stat = admin.get(znodes.CONTROLLER_EPOCH)
    term = znodes.decode_controller_epoch(data)
    admin.set(znodes.CONTROLLER_EPOCH, znodes.encode_controller_epoch(term + 1), version=stat.version)
    create_topic(admin, "t", {0: [1]})
    written = wait_state(admin, "t", 0, "a controller to initialize the partition", lambda s: s.leader == 1)
    assert written.controller_epoch == term + 2  # by a new term: the write under the old one was refused
    assert controller_of(admin) == (1, term + 2)


def test_a_controller_acts_although_its_image_still_names_the_one_before(start_members, admin):
    """A broker's create of /controller can return before its own watch has
    re-read the znode: the image then names the broker it replaced.  It must
    check ZooKeeper, not resign while keeping the znode (no controller at all)."""
    members = start_members(1)
    controller = members[1].controller
    wait_for(lambda: controller.active, WAIT_S, "broker 1 to be controller")
    stale = dataclasses.replace(members[1].watcher.image(), controller_id=7)
    controller._reconcile(stale)
    assert controller.active
    create_topic(admin, "t", {0: [1]})
    wait_state(admin, "t", 0, "the controller to initialize the partition", lambda s: s.leader == 1)


def test_a_broker_holding_the_controller_znode_without_acting_gives_it_up(chroot, admin):
    """A /controller znode of our own session that we do not act on (a term
    that ended fenced) would leave the cluster without a controller: the
    broker deletes it and the election runs again."""
    client = session.connect(chroot, SESSION_MS, 10000)
    client.create(znodes.CONTROLLER, znodes.encode_controller(1, 0), ephemeral=True)
    epoch = znodes.decode_controller_epoch(admin.get(znodes.CONTROLLER_EPOCH)[0]) \
        if admin.exists(znodes.CONTROLLER_EPOCH) else 0
    watcher = ImageWatcher(client)
    watcher.start()
    controller = Controller(client, 1, watcher)
    controller.start()
    try:
        wait_for(lambda: controller.active, WAIT_S, "broker 1 to act as controller")
        assert controller_of(admin) == (1, epoch + 1)
    finally:
        controller.stop()
        watcher.stop()
        session.close(client)
