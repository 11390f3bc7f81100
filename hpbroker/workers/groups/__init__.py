"""Consumer groups (Kafka's classic protocol) and committed offsets.

* ``state``       one group's membership state machine (join, sync, heartbeat, leave, timers)
* ``offsets``     the in-memory cache of committed offsets and its expiry rule
* ``records``     the key/value layouts of ``__consumer_offsets`` records
* ``coordinator`` the per-worker ``GroupCoordinator`` that ties them to the log
"""

from hpbroker.workers.groups.coordinator import GroupCoordinator

__all__ = ["GroupCoordinator"]
