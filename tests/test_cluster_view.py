"""What a client is told about the brokers depends on the listener it came in
on: each broker's address on that listener, brokers without it left out."""

from hpbroker.cluster import znodes
from hpbroker.cluster.image import ClusterImage
from hpbroker.errors import ErrorCode
from hpbroker.server.ownership import group_partition
from hpbroker.workers.cluster_view import BrokerNode, ImageView, StandaloneView

TOPIC = "orders"


def registration(broker_id: int, external: bool) -> znodes.BrokerRegistration:
    others = (znodes.Endpoint("EXTERNAL", f"b{broker_id}.example", 9093, "SASL_SSL"),) if external else ()
    return znodes.BrokerRegistration(broker_id, f"10.0.0.{broker_id}", 9092, listener="INTERNAL", others=others)


def test_an_image_answers_with_each_brokers_address_on_the_clients_listener():
    view = ImageView(BrokerNode(1, "10.0.0.1", 9092))
    view.image = ClusterImage(
        "c", {1: registration(1, True), 2: registration(2, False)}, 1,
        {TOPIC: znodes.TopicAssignment(TOPIC, {0: [1, 2], 1: [2, 1]})},
        {(TOPIC, 0): znodes.PartitionState(1, 3, [1, 2], 1), (TOPIC, 1): znodes.PartitionState(2, 3, [2, 1], 1)})
    assert view.brokers() == [BrokerNode(1, "10.0.0.1", 9092), BrokerNode(2, "10.0.0.2", 9092)]
    assert view.brokers("EXTERNAL") == [BrokerNode(1, "b1.example", 9093)]  # broker 2 has no EXTERNAL
    assert view.node(2, "EXTERNAL") is None and view.node(2) == BrokerNode(2, "10.0.0.2", 9092)
    assert view.partition(TOPIC, 1).error == ErrorCode.none  # the leader is there; reaching it is per listener
    # a coordinator (the leader of the key's partition) is found, or not, on the client's listener
    by_leader = {view.partition(TOPIC, group_partition(k, 2)).leader: k for k in ("a", "b", "c", "d", "e", "f")}
    assert view.coordinator(by_leader[1], 2, TOPIC, "EXTERNAL") == BrokerNode(1, "b1.example", 9093)
    assert view.coordinator(by_leader[2], 2, TOPIC, "EXTERNAL") is None
    assert view.coordinator(by_leader[2], 2, TOPIC) == BrokerNode(2, "10.0.0.2", 9092)


def test_standalone_answers_with_its_address_on_each_advertised_listener():
    me = BrokerNode(0, "10.0.0.1", 9092)
    view = StandaloneView(me, {"INTERNAL": me, "EXTERNAL": BrokerNode(0, "broker.example", 9093)})
    assert view.brokers() == [me] and view.brokers("INTERNAL") == [me]
    assert view.coordinator("g", 50, listener="EXTERNAL") == BrokerNode(0, "broker.example", 9093)
    assert view.brokers("HIDDEN") == [] and view.node(0, "HIDDEN") is None  # bound, not advertised
    assert StandaloneView(me).brokers("ANY") == [me]  # no listeners given: one address for all
