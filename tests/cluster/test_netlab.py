"""The network lab itself (tests.cluster.netlab): hosts come up in namespaces
of their own and leave nothing behind; a cut really stops TCP both ways (an
established connection hangs, and carries on once healed); a thread moved
onto a host is moved back; and a LabCluster (ZooKeeper and three brokers on
lab hosts) takes writes from the client host with a history that checks out."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness.waiting import wait_for
from tests.cluster.history import ConsumerHistory, ProducerHistory, check, read_everything
from tests.cluster.netlab import NetLab, sweep_stale

ECHO = """
import socket, sys, threading
def serve(c):
    while data := c.recv(4096):
        c.sendall(data)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7000))
s.listen()
print("listening", flush=True)
while True:
    threading.Thread(target=serve, args=(s.accept()[0],), daemon=True).start()
"""
BLOCKED_S = 0.3  # a connect not answered this long is blocked (on the lab it takes well under a millisecond)


def netns_id(path: str) -> int:
    return os.stat(path).st_ino


def echo_server(host) -> subprocess.Popen:
    server = host.popen([sys.executable, "-c", ECHO, host.ip], stdout=subprocess.PIPE)
    assert server.stdout.readline() == b"listening\n"
    return server


def reaches(lab, source, target) -> bool:
    """``source`` opens a TCP connection to ``target``'s echo server (within 10 s)."""
    return _connects(lab, source, target, 10.0)


def blocked(lab, source, target) -> bool:
    """``source``'s connect to ``target`` goes unanswered (for BLOCKED_S)."""
    return not _connects(lab, source, target, BLOCKED_S)


def _connects(lab, source, target, timeout: float) -> bool:
    with lab.inside(source):
        try:
            socket.create_connection((target.ip, 7000), timeout=timeout).close()
            return True
        except TimeoutError:
            return False


def root_links() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout


def test_the_lab_comes_up_in_namespaces_of_its_own_and_leaves_nothing_behind():
    before = root_links()
    # a crashed earlier run's namespace (its process is gone) is swept by the next lab
    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"hpnl-{gone.pid}-1-bridge"
    subprocess.run(["ip", "netns", "add", stale], check=True)
    with NetLab() as lab:
        assert stale not in os.listdir("/var/run/netns")
        a, b = lab.add_host("a"), lab.add_host("b")
        assert sorted(lab.namespaces()) == sorted([lab.lab_netns, a.netns, b.netns])
        assert a.ip != b.ip and a.ip.startswith("10.213.0.")
        addresses = subprocess.run(a.command(["ip", "-o", "-4", "addr"]), capture_output=True, text=True).stdout
        assert f"inet {a.ip}/24" in addresses and "inet 127.0.0.1/8" in addresses
        sleeper = a.popen(["sleep", "600"])  # whatever still runs on a host goes with the lab
        assert root_links() == before, "the root namespace's links changed"
    assert sleeper.wait(10) == -9
    assert not [n for n in os.listdir("/var/run/netns") if n.startswith(lab.prefix)]
    assert root_links() == before
    assert sweep_stale() == []


def test_a_cut_drops_tcp_both_ways_until_healed(netlab):
    a, b, c = (netlab.add_host(name) for name in "abc")
    servers = [echo_server(h) for h in (a, b, c)]
    try:
        with netlab.inside(b):
            established = socket.create_connection((a.ip, 7000), timeout=10)
        established.sendall(b"one")
        assert established.recv(16) == b"one"

        netlab.cut(a, b)
        netlab.cut(b, a)  # idempotent
        assert blocked(netlab, b, a) and blocked(netlab, a, b)
        assert reaches(netlab, c, a) and reaches(netlab, c, b) and reaches(netlab, a, c)
        # the established connection hangs (no reset): what is sent now waits in the kernel
        established.settimeout(BLOCKED_S)
        established.sendall(b"two")
        with pytest.raises(TimeoutError):
            established.recv(16)

        netlab.heal()
        netlab.heal()
        assert reaches(netlab, b, a) and reaches(netlab, a, b)
        established.settimeout(30)  # TCP retransmits on its own backoff: the reply comes
        assert established.recv(16) == b"two"
        established.close()

        netlab.isolate(a)
        assert blocked(netlab, b, a) and blocked(netlab, c, a) and blocked(netlab, a, c)
        assert reaches(netlab, b, c)
        netlab.heal()
        netlab.split([a], [b, c])
        assert blocked(netlab, a, b) and blocked(netlab, c, a) and reaches(netlab, c, b)
        netlab.heal()
        assert all(reaches(netlab, x, y) for x in (a, b, c) for y in (a, b, c))
    finally:
        for server in servers:
            server.kill()
            server.wait()


def test_inside_moves_the_calling_thread_and_threads_born_there_stay(netlab):
    a = netlab.add_host("a")
    home = netns_id("/proc/thread-self/ns/net")
    there = netns_id(f"/var/run/netns/{a.netns}")
    born = {}

    def child():
        born["child"] = netns_id("/proc/thread-self/ns/net")

    with netlab.inside(a):
        assert netns_id("/proc/thread-self/ns/net") == there
        assert netns_id(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net") == there
        thread = threading.Thread(target=child)
        thread.start()
    thread.join()
    assert netns_id("/proc/thread-self/ns/net") == home
    assert born["child"] == there


def test_a_lab_cluster_takes_writes_from_the_client_host_and_the_history_checks_out(lab_cluster):
    cluster = lab_cluster
    topic, partitions = "lab", 3
    assert cluster.registered() == {1, 2, 3}
    assert {b.host for b in cluster.brokers.values()} == {h.ip for h in cluster.hosts.values()}
    with cluster.inside_client():
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, partitions, 3)])[topic].result(30)
        cluster.wait_in_sync(topic, partitions)
        producers = ProducerHistory(cluster.bootstrap, topic, producers=2)
        consumer = ConsumerHistory(cluster.bootstrap, topic, partitions)
    try:
        wait_for(producers.progressed(300), 60, "writes to be acknowledged")
        # a follower of partition 0 cut off from everything: acks=all writes go on (ISR 2 of 3)
        leader = cluster.leader_of(topic, 0)
        follower = next(i for i in cluster.state(topic, 0).isr if i != leader)
        cluster.lab.isolate(cluster.hosts[follower])
        t0 = time.monotonic()
        wait_for(lambda: follower not in cluster.state(topic, 0).isr, 30, f"broker {follower} to leave the ISR")
        wait_for(producers.progressed(200), 60, f"writes to go on without broker {follower}")
        assert producers.acked_between(t0)
        cluster.lab.heal()
        cluster.wait_in_sync(topic, partitions)
        wait_for(producers.progressed(100), 60, "writes after the heal")
    finally:
        producers.stop()
        consumer.stop()
    final = read_everything(cluster.bootstrap, topic, partitions, netns=cluster.client.netns)
    report = check(producers, final, consumer).assert_valid()
    assert report.acked >= 600 and report.failed == 0
    assert report.live_reads > 0
