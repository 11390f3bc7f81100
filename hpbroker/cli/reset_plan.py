"""Where ``groups reset-offsets`` moves each partition: pure arithmetic over
offsets already fetched, so it can be checked without a broker.

As in kafka-consumer-groups, a target below the log start or beyond the log
end is clamped to it, and a time after the last record means the log end.
"""

from hpbroker.cli.connection import CliError


def plan(partitions, strategy: str, value, committed: dict, earliest: dict, latest: dict, at_time: dict) -> dict:
    """``{(topic, partition): new offset}`` for ``strategy`` in
    earliest | latest | offset | datetime | shift (``value`` holds N; ``at_time``
    the ListOffsets answers for datetime)."""
    targets = {}
    for tp in partitions:
        low, high = earliest[tp], latest[tp]
        if strategy == "earliest":
            target = low
        elif strategy == "latest":
            target = high
        elif strategy == "offset":
            target = value
        elif strategy == "datetime":
            target = at_time[tp] if at_time.get(tp, -1) >= 0 else high
        elif strategy == "shift":
            current = committed.get(tp, -1)
            if current < 0:
                raise CliError(f"cannot shift {tp[0]}[{tp[1]}]: the group has no committed offset there")
            target = current + value
        else:
            raise ValueError(strategy)
        targets[tp] = min(max(target, low), high)
    return targets
