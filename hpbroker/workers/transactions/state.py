"""One transactional id as its coordinator keeps it, and the states it moves
through (Kafka's ``TransactionState``; the numbers are what
``__transaction_state`` stores, the names what the admin APIs show)::

    Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit --markers--> CompleteCommit
                                            \\--> PrepareAbort  --markers--> CompleteAbort
    Empty / Complete* --AddPartitions--> Ongoing again; InitProducerId --> Empty (a new epoch)

An Ongoing transaction whose producer is fenced (a new instance, or its
timeout) goes to PrepareAbort under the bumped epoch.  Every state change
is written to ``__transaction_state`` before it takes effect.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace

from hpbroker.workers.transactions.records import TxnLogValue

MAX_EPOCH = 32767  # Short.MAX_VALUE: an epoch is an int16


class TxnState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return _NAMES[self]

    @classmethod
    def by_display(cls, name: str) -> TxnState | None:
        return _BY_NAME.get(name.lower())


_NAMES = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing", TxnState.PREPARE_COMMIT: "PrepareCommit",
          TxnState.PREPARE_ABORT: "PrepareAbort", TxnState.COMPLETE_COMMIT: "CompleteCommit",
          TxnState.COMPLETE_ABORT: "CompleteAbort", TxnState.DEAD: "Dead",
          TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_NAME = {name.lower(): state for state, name in _NAMES.items()}
PREPARING = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # the epoch before the last InitProducerId: a retry of that call (KIP-360) gets the same answer
    last_epoch: int = -1
    # the producer id before the last InitProducerId, when that call found the epoch
    # exhausted and gave a new id: a retry of it gets the same answer too (kept in
    # memory only, as Kafka 3's coordinator keeps it)
    previous_producer_id: int = -1
    # a change is being written or its markers sent: other calls answer CONCURRENT_TRANSACTIONS
    busy: bool = field(default=False, compare=False)

    def value(self) -> TxnLogValue:
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, int(self.state),
                           tuple(sorted(self.partitions)), self.last_update_ms, self.start_ms)

    @classmethod
    def from_value(cls, transactional_id: str, value: TxnLogValue) -> TxnMetadata:
        try:
            state = TxnState(value.status)
        except ValueError:
            state = TxnState.DEAD
        return cls(transactional_id, value.producer_id, value.producer_epoch, value.timeout_ms, state,
                   frozenset(value.partitions), value.start_ms, value.last_update_ms)

    def moved(self, **changes) -> TxnMetadata:
        """The metadata after a change, not yet in effect (it is written first)."""
        return replace(self, busy=False, **changes)

    def expired(self, now: int) -> bool:
        """An Ongoing transaction past its timeout: its coordinator aborts it."""
        return self.state is TxnState.ONGOING and now - self.start_ms > self.timeout_ms
