"""Cluster mode: brokers coordinating through ZooKeeper, in Kafka's znode layout.

Only this package imports kazoo; a broker without ``zookeeper.connect`` never
loads it.  ``znodes`` holds the paths and the JSON of each znode (what an
operator sees with ``zkCli.sh``), ``session`` connects, and ``registration``
makes a broker a member: the cluster id, its broker id, its ephemeral node.
"""
