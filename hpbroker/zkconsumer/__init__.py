"""The ZooKeeper-coordinated consumer: a client library whose group members
coordinate among themselves through ZooKeeper (registry, watches, range
rebalancing, offsets in ZooKeeper or Kafka), as Kafka's original high-level
consumer did, on top of a cluster-mode hpbroker or Kafka cluster."""

from hpbroker.zkconsumer.consumer import RebalanceFailed, ZookeeperConsumer
from hpbroker.zkconsumer.offset_storage import OffsetStorageError
from hpbroker.zkconsumer.partition_fetcher import CorruptFetchError, Message

__all__ = ["CorruptFetchError", "Message", "OffsetStorageError", "RebalanceFailed", "ZookeeperConsumer"]
