"""Per-log configuration under Kafka's names and defaults.

Kafka names each setting twice: a topic-level key (``segment.bytes``) and the
broker-wide default it falls back to (``log.segment.bytes``).  ``LogConfig``
holds the topic-level values; ``from_broker_properties`` reads the broker keys
and ``with_overrides`` applies a topic's own keys on top.  A few settings a log
needs exist only broker-wide (``producer.id.expiration.ms``): their ``LogKey``
has no topic key, so no topic can override them and DescribeConfigs does not
list them among a topic's settings.  The compression settings have one name
at both levels (``compression.type``), as in Kafka.
"""

import dataclasses
from dataclasses import dataclass

from hpbroker.storage import format_version

LONG_MAX = (1 << 63) - 1
DAY_MS = 24 * 60 * 60 * 1000


class ConfigError(ValueError):
    """A configuration key is unknown or its value is invalid."""


def parse_bool(text: str) -> bool:
    """Kafka's booleans: ``true`` or ``false``, any case (the one parser for every key)."""
    lowered = str(text).strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ValueError(f"expected true or false, got {text!r}")


def _timestamp_type(text: str) -> str:
    if text not in ("CreateTime", "LogAppendTime"):
        raise ValueError(f"expected CreateTime or LogAppendTime, got {text!r}")
    return text


def _cleanup_policy(text: str) -> str:
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    if not parts or any(p not in ("delete", "compact") for p in parts):
        raise ValueError(f"expected delete, compact or both, got {text!r}")
    return ",".join(sorted(set(parts), key=("compact", "delete").index))


# compression.type: Kafka's BrokerCompressionType names, in its order; the
# codec ids are the record batch's (``producer`` keeps the producer's).
COMPRESSION_CODECS = {"uncompressed": 0, "zstd": 4, "lz4": 3, "snappy": 2, "gzip": 1}
PRODUCER = "producer"


def _compression_type(text: str) -> str:
    value = str(text).strip()
    if value != PRODUCER and value not in COMPRESSION_CODECS:
        raise ValueError(f"String must be one of: {', '.join([*COMPRESSION_CODECS, PRODUCER])}")
    return value


def _gzip_level(text: str) -> int:
    """Deflater's levels 1-9, or -1 for zlib's default (as Kafka validates it)."""
    level = int(str(text).strip())
    if not (1 <= level <= 9 or level == -1):
        raise ValueError("Value must be between 1 and 9 or equal to -1")
    return level


def _ratio(text: str) -> float:
    value = float(str(text).strip())
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a ratio in [0, 1], got {text!r}")
    return value


@dataclass(frozen=True)
class LogKey:
    field: str
    topic_key: str | None  # None: broker-wide only
    broker_key: str
    parse: object
    minimum: int | None = None
    maximum: int | None = None


LOG_KEYS = (
    LogKey("segment_bytes", "segment.bytes", "log.segment.bytes", int, 14),
    LogKey("segment_ms", "segment.ms", "log.roll.ms", int, 1),
    LogKey("segment_jitter_ms", "segment.jitter.ms", "log.roll.jitter.ms", int, 0),
    LogKey("segment_index_bytes", "segment.index.bytes", "log.index.size.max.bytes", int, 4),
    LogKey("index_interval_bytes", "index.interval.bytes", "log.index.interval.bytes", int, 0),
    LogKey("flush_messages", "flush.messages", "log.flush.interval.messages", int, 1),
    LogKey("flush_ms", "flush.ms", "log.flush.interval.ms", int, 0),
    LogKey("retention_ms", "retention.ms", "log.retention.ms", int, -1),
    LogKey("retention_bytes", "retention.bytes", "log.retention.bytes", int, -1),
    LogKey("file_delete_delay_ms", "file.delete.delay.ms", "log.segment.delete.delay.ms", int, 0),
    LogKey("max_message_bytes", "max.message.bytes", "message.max.bytes", int, 0),
    LogKey("message_timestamp_type", "message.timestamp.type", "log.message.timestamp.type", _timestamp_type),
    LogKey("cleanup_policy", "cleanup.policy", "log.cleanup.policy", _cleanup_policy),
    LogKey("delete_retention_ms", "delete.retention.ms", "log.cleaner.delete.retention.ms", int, 0),
    LogKey("preallocate", "preallocate", "log.preallocate", parse_bool),
    LogKey("min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", _ratio),
    LogKey("compression_type", "compression.type", "compression.type", _compression_type),
    LogKey("compression_gzip_level", "compression.gzip.level", "compression.gzip.level", _gzip_level),
    LogKey("compression_lz4_level", "compression.lz4.level", "compression.lz4.level", int, 1, 17),
    LogKey("compression_zstd_level", "compression.zstd.level", "compression.zstd.level", int, -131072, 22),
    LogKey("message_format_version", "message.format.version", "log.message.format.version", format_version.parse),
    LogKey("min_compaction_lag_ms", "min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", int, 0),
    LogKey("max_compaction_lag_ms", "max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", int, 1),
    # Replication (cluster mode): acks=all needs this many in-sync replicas; a
    # replica outside the ISR may lead only when unclean election is allowed.
    LogKey("min_insync_replicas", "min.insync.replicas", "min.insync.replicas", int, 1),
    LogKey("unclean_leader_election", "unclean.leader.election.enable", "unclean.leader.election.enable", parse_bool),
    # The offset map's memory per cleaning pass (Kafka splits it over its cleaner threads).
    LogKey("cleaner_dedupe_buffer_size", None, "log.cleaner.dedupe.buffer.size", int, 1024 * 1024),
    LogKey("cleaner_backoff_ms", None, "log.cleaner.backoff.ms", int, 0),
    LogKey("producer_id_expiration_ms", None, "producer.id.expiration.ms", int, 1),
    LogKey("producer_id_expiration_check_interval_ms", None, "producer.id.expiration.check.interval.ms", int, 1),
)
_BY_TOPIC_KEY = {k.topic_key: k for k in LOG_KEYS if k.topic_key is not None}
_BY_BROKER_KEY = {k.broker_key: k for k in LOG_KEYS}
# Coarser broker spellings, used only when the finer one is absent (as in Kafka).
_BROKER_ALIASES = {
    "log.roll.hours": ("log.roll.ms", 60 * 60 * 1000),
    "log.roll.jitter.hours": ("log.roll.jitter.ms", 60 * 60 * 1000),
    "log.retention.minutes": ("log.retention.ms", 60 * 1000),
    "log.retention.hours": ("log.retention.ms", 60 * 60 * 1000),
}


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * DAY_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_ms: int = 7 * DAY_MS
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    max_message_bytes: int = 1024 * 1024 + 12
    message_timestamp_type: str = "CreateTime"
    cleanup_policy: str = "delete"
    delete_retention_ms: int = DAY_MS
    preallocate: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    compression_type: str = PRODUCER
    compression_gzip_level: int = -1  # Deflater.DEFAULT_COMPRESSION
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    message_format_version: str = format_version.DEFAULT  # accepted, ignored (Kafka 3.x)
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    min_insync_replicas: int = 1
    unclean_leader_election: bool = False
    cleaner_dedupe_buffer_size: int = 128 * 1024 * 1024
    cleaner_backoff_ms: int = 15_000
    producer_id_expiration_ms: int = DAY_MS
    producer_id_expiration_check_interval_ms: int = 10 * 60 * 1000

    @classmethod
    def from_broker_properties(cls, props: dict) -> "LogConfig":
        """Defaults for every log from a broker's properties; keys that are not
        log settings are left for the broker's own config to judge."""
        props = dict(props)
        for alias, (key, factor) in _BROKER_ALIASES.items():
            if alias in props and key not in props:
                props[key] = str(int(_parse(alias, props[alias], int)) * factor)
        values = {}
        for name, text in props.items():
            key = _BY_BROKER_KEY.get(name)
            if key is not None:
                values[key.field] = _convert(key, name, text)
        return cls(**values)

    def with_overrides(self, topic_config: dict) -> "LogConfig":
        """This config with a topic's own settings applied; unknown keys are an error."""
        values = {}
        for name, text in topic_config.items():
            key = _BY_TOPIC_KEY.get(name)
            if key is None:
                raise ConfigError(f"unknown topic config {name!r}")
            values[key.field] = _convert(key, name, text)
        return dataclasses.replace(self, **values)

    def topic_properties(self) -> dict[str, str]:
        """Every setting under its topic-level name, as DescribeConfigs shows them."""
        return {k.topic_key: _render(getattr(self, k.field)) for k in LOG_KEYS if k.topic_key is not None}

    @property
    def compact(self) -> bool:
        """``cleanup.policy`` includes ``compact``: keys required, the cleaner runs."""
        return "compact" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def target_codec(self) -> int | None:
        """The codec id every appended batch is recompressed into; None for
        ``producer``, which keeps the batches as they came."""
        return COMPRESSION_CODECS.get(self.compression_type)

    @property
    def compression_level(self) -> int | None:
        """The configured level of the target codec (None: it has no levels)."""
        return {"gzip": self.compression_gzip_level, "lz4": self.compression_lz4_level,
                "zstd": self.compression_zstd_level}.get(self.compression_type)


def is_topic_config_key(name: str) -> bool:
    return name in _BY_TOPIC_KEY


def broker_key_of(topic_key: str) -> str | None:
    """The broker property that sets a topic setting's default (``segment.bytes`` -> ``log.segment.bytes``)."""
    key = _BY_TOPIC_KEY.get(topic_key)
    return key.broker_key if key else None


def broker_log_properties(config: "LogConfig") -> dict[str, str]:
    """Every log setting under its broker-level name, for DescribeConfigs on a broker."""
    return {k.broker_key: _render(getattr(config, k.field)) for k in LOG_KEYS}


def is_broker_log_key(name: str) -> bool:
    """A broker property that sets a log default (``log.segment.bytes``, ...)."""
    return name in _BY_BROKER_KEY or name in _BROKER_ALIASES


def _parse(name, text, parse):
    try:
        return parse(text) if parse is not int else int(str(text).strip())
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid value {text!r} for {name}: {exc}") from None


def _convert(key: LogKey, name: str, text):
    value = _parse(name, text, key.parse)
    if key.minimum is not None and value < key.minimum:
        raise ConfigError(f"invalid value {value} for {name}: must be at least {key.minimum}")
    if key.maximum is not None and value > key.maximum:
        raise ConfigError(f"invalid value {value} for {name}: must be at most {key.maximum}")
    return value


def _render(value) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
