"""Memory the acceptor shares with its workers.

Everything here lives in anonymous ``MAP_SHARED`` mappings that the acceptor
makes before it forks its first worker: every worker, and every worker
restarted later (forked from the same acceptor), maps the same pages; nothing
has a name in /dev/shm, so nothing can leak when the whole broker is
SIGKILLed, and the kernel frees the pages with the last process of the broker.

* ``region``           the mappings themselves
* ``partition_table``  every partition's offsets, published by its owner
* ``counters``         counters with one writer each (topic changes by worker)
* ``payload_arena``    records on their way to the worker owning their partition
* ``cluster_board``    the cluster image and the session's state, from the acceptor (cluster mode)
* ``broker_memory``    all of the above for one broker, made before the first fork
"""
