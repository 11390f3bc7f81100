"""Consumer groups (Kafka's classic protocol and KIP-848's consumer protocol) and committed offsets.

* ``state``       one classic group's membership state machine (join, sync, heartbeat, leave, timers)
* ``consumer_group`` one consumer-protocol group: member epochs, hand-over, fencing, timers
* ``assignors``   the consumer protocol's server-side assignors (uniform, range)
* ``offsets``     the in-memory cache of committed offsets and its expiry rule
* ``records``     the key/value layouts of ``__consumer_offsets`` records
* ``coordinator`` the per-worker ``GroupCoordinator`` that ties them to the log
"""

from hpbroker.workers.groups.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
