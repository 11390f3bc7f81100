"""Committed offsets in memory: the cache in front of ``__consumer_offsets``.

The log is the truth (records.py); this is its latest value per
(group, topic, partition), rebuilt by replaying the log at load and updated
only after an append succeeded.  Expiry follows KIP-211: offsets of an empty
group expire ``offsets.retention.minutes`` after the group became empty;
offsets of a live consumer group only for topics it no longer subscribes to;
offsets committed outside group management, ``retention`` after the commit.
"""

from __future__ import annotations

from hpbroker.workers.groups.records import OffsetValue


class OffsetStore:
    def __init__(self):
        self._groups: dict[str, dict[tuple[str, int], OffsetValue]] = {}
        # where in __consumer_offsets each current value was appended: a transaction's
        # offset that commits takes effect only over an older one (Kafka's rule)
        self._appended_at: dict[tuple[str, str, int], int] = {}
        # offsets committed inside transactions, by producer id, until their marker:
        # (group, topic, partition) -> (value, where appended); applied on COMMIT, dropped on ABORT
        self._pending: dict[int, dict[tuple[str, str, int], tuple[OffsetValue, int]]] = {}

    def put_pending(self, producer_id: int, group: str, topic: str, partition: int, value: OffsetValue,
                    at: int = -1) -> None:
        self._pending.setdefault(producer_id, {})[(group, topic, partition)] = (value, at)

    def complete(self, producer_id: int, commit: bool, here=lambda group: True) -> None:
        """A transaction's marker: its pending offsets of the groups ``here``
        selects (those of the marker's offsets partition) take effect, or are
        dropped."""
        pending = self._pending.get(producer_id)
        if not pending:
            return
        for key in [key for key in pending if here(key[0])]:
            value, at = pending.pop(key)
            if commit and at >= self._appended_at.get(key, -1):  # not over a plain commit appended after it
                self.put(*key, value, at)
        if not pending:
            del self._pending[producer_id]

    def is_pending(self, group: str, topic: str, partition: int) -> bool:
        return any((group, topic, partition) in offsets for offsets in self._pending.values())

    def drop_pending(self, here) -> None:
        """Forget the pending offsets of the groups ``here`` selects (their partition moved)."""
        for producer_id in list(self._pending):
            offsets = self._pending[producer_id]
            for key in [k for k in offsets if here(k[0])]:
                del offsets[key]
            if not offsets:
                del self._pending[producer_id]

    def put(self, group: str, topic: str, partition: int, value: OffsetValue, at: int = -1) -> None:
        """``at``: where the value was appended in ``__consumer_offsets`` (-1: unknown)."""
        self._groups.setdefault(group, {})[(topic, partition)] = value
        self._appended_at[(group, topic, partition)] = at

    def delete(self, group: str, topic: str, partition: int) -> None:
        self._appended_at.pop((group, topic, partition), None)
        offsets = self._groups.get(group)
        if offsets is not None:
            offsets.pop((topic, partition), None)
            if not offsets:
                del self._groups[group]

    def get(self, group: str, topic: str, partition: int) -> OffsetValue | None:
        return self._groups.get(group, {}).get((topic, partition))

    def of_group(self, group: str) -> dict[tuple[str, int], OffsetValue]:
        return dict(self._groups.get(group, {}))

    def drop_group(self, group: str) -> list[tuple[str, int]]:
        return list(self._groups.pop(group, {}))

    def groups(self) -> list[str]:
        return list(self._groups)

    def expired(self, group: str, now: int, retention_ms: int, *, empty_since: int | None,
                keep_topics: set[str] | None) -> list[tuple[str, int]]:
        """The offsets of ``group`` to delete now.

        ``empty_since``: when an empty consumer group became empty (its offsets
        all age from then); ``keep_topics``: topics a live group subscribes to
        (never expired; None = unknown, so keep everything)."""
        found = []
        for (topic, partition), v in self._groups.get(group, {}).items():
            if v.expire_timestamp >= 0:  # set explicitly (OffsetCommit v1 semantics)
                if now >= v.expire_timestamp:
                    found.append((topic, partition))
                continue
            if empty_since is not None:
                base = empty_since
            elif keep_topics is None or topic in keep_topics:
                continue
            else:
                base = v.commit_timestamp
            if now - base >= retention_ms:
                found.append((topic, partition))
        return found
