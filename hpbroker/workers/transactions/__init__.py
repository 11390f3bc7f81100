"""Transactions (KIP-98), the coordinator's side:

* ``records`` the keys and values of ``__transaction_state``, Kafka's layouts
* ``state`` a transactional id's metadata and the states it moves through
* ``coordinator`` the per-worker ``TransactionCoordinator`` that ties them to the log
  and sends the markers

The partitions' side (producer state, the last stable offset, ``.txnindex``)
lives with the log, in ``hpbroker.storage``.
"""

from hpbroker.workers.transactions.coordinator import TransactionCoordinator

__all__ = ["TransactionCoordinator"]
