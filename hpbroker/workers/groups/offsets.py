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

    def put(self, group: str, topic: str, partition: int, value: OffsetValue) -> None:
        self._groups.setdefault(group, {})[(topic, partition)] = value

    def delete(self, group: str, topic: str, partition: int) -> None:
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
