"""Reader options, named as Spark's Kafka source names them where one exists.

    path                    log directory, or several separated by commas (log.dirs)
    subscribe / topic       topic name(s), comma-separated
    subscribePattern        regular expression a whole topic name must match
    assign                  JSON {"topic": [0, 1]}
                            (exactly one of subscribe/topic, subscribePattern, assign)
    startingOffsets         earliest | latest | JSON {"topic": {"0": 23, "1": -2}};
                            -2 = earliest, -1 = latest.  Default: earliest for
                            batch reads, latest for streams (as Spark's)
    endingOffsets           latest | JSON (-1 = latest); batch reads only
    startingTimestamp       ms since the epoch: start each partition at its first
                            record with a timestamp >= this (latest if none)
    isolation / kafka.isolation.level
                            read_uncommitted (default) | read_committed
    failOnDataLoss          true (default): fail when planned offsets are gone
                            (retention, truncation, corruption) instead of skipping
    useCheckpoints          true (default): never read past the broker's
                            recovery-point / replication-offset checkpoints
    maxBytesPerPartition    split segments into input partitions of about this
                            many bytes (default 128 MiB)
    maxRecordsPerTrigger, maxBytesPerTrigger
                            streaming: cap on one micro-batch
"""

import json
from dataclasses import dataclass

from hpbroker.spark.logdir import log_dirs_of

DEFAULT_MAX_BYTES_PER_PARTITION = 128 << 20


class OptionError(ValueError):
    pass


def _flag(value, name) -> bool:
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise OptionError(f"option {name} must be true or false, not {value!r}")
    return text == "true"


def _positive(value, name) -> int | None:
    if value is None:
        return None
    number = int(value)
    if number <= 0:
        raise OptionError(f"option {name} must be positive, not {value!r}")
    return number


def parse_offsets(value, name: str):
    """'earliest' / 'latest' or ``{(topic, partition): offset}``."""
    text = str(value).strip()
    if text.lower() in ("earliest", "latest"):
        return text.lower()
    try:
        raw = json.loads(text)
        return {(t, int(p)): int(o) for t, parts in raw.items() for p, o in parts.items()}
    except (ValueError, AttributeError) as exc:
        raise OptionError(f"option {name}: expected earliest, latest or JSON like "
                          f'{{"topic": {{"0": 42}}}}, not {value!r}') from exc


@dataclass(frozen=True)
class Options:
    log_dirs: tuple
    topics: tuple | None
    pattern: str | None
    assign: dict | None
    starting: object
    ending: object
    starting_timestamp: int | None
    read_committed: bool
    fail_on_data_loss: bool
    use_checkpoints: bool
    max_bytes_per_partition: int
    max_records_per_trigger: int | None
    max_bytes_per_trigger: int | None

    @classmethod
    def parse(cls, options, *, streaming: bool) -> "Options":
        get = options.get
        path = get("path")
        if not path:
            raise OptionError("hpbroker source: give the log directory: .load(path) or option path")
        chosen = [k for k in ("subscribe", "topic", "subscribePattern", "assign") if get(k)]
        if len(chosen) != 1:
            raise OptionError("hpbroker source: give exactly one of subscribe (or topic), subscribePattern, assign")
        topics = pattern = assign = None
        if chosen[0] in ("subscribe", "topic"):
            topics = tuple(t.strip() for t in get(chosen[0]).split(",") if t.strip())
        elif chosen[0] == "subscribePattern":
            pattern = get("subscribePattern")
        else:
            assign = {t: [int(p) for p in ps] for t, ps in json.loads(get("assign")).items()}
        isolation = (get("isolation") or get("kafka.isolation.level") or "read_uncommitted").lower()
        if isolation not in ("read_committed", "read_uncommitted"):
            raise OptionError(f"isolation must be read_committed or read_uncommitted, not {isolation!r}")
        ending = parse_offsets(get("endingOffsets") or "latest", "endingOffsets")
        if ending == "earliest":
            raise OptionError("endingOffsets cannot be earliest")
        timestamp = get("startingTimestamp")
        return cls(
            log_dirs=tuple(log_dirs_of(path)),
            topics=topics, pattern=pattern, assign=assign,
            starting=parse_offsets(get("startingOffsets") or ("latest" if streaming else "earliest"),
                                   "startingOffsets"),
            ending=ending,
            starting_timestamp=int(timestamp) if timestamp is not None else None,
            read_committed=isolation == "read_committed",
            fail_on_data_loss=_flag(get("failOnDataLoss") or "true", "failOnDataLoss"),
            use_checkpoints=_flag(get("useCheckpoints") or "true", "useCheckpoints"),
            max_bytes_per_partition=_positive(get("maxBytesPerPartition"), "maxBytesPerPartition")
            or DEFAULT_MAX_BYTES_PER_PARTITION,
            max_records_per_trigger=_positive(get("maxRecordsPerTrigger"), "maxRecordsPerTrigger"),
            max_bytes_per_trigger=_positive(get("maxBytesPerTrigger"), "maxBytesPerTrigger"),
        )
