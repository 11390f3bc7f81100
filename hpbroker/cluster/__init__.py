"""Cluster mode: brokers coordinating through ZooKeeper, in Kafka's znode layout.

Only this package imports kazoo; a broker without ``zookeeper.connect`` never
loads it.  ``znodes`` holds the paths and the JSON of each znode (what an
operator sees with ``zkCli.sh``), ``session`` connects, and ``registration``
makes a broker a member: the cluster id, its broker id, its ephemeral node.
A broker holds one session, its acceptor's; ``board_publisher`` and
``zk_proxy`` lend it to the workers, ``shared_link`` is a worker's end.
"""
