"""Config entries as DescribeConfigs / CreateTopics show them: value and source."""

# Kafka's ConfigSource ids.
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# Kafka's ConfigType ids.
_BOOLEAN, _STRING, _LONG = 1, 2, 5

# topic key -> the broker key that sets its default
_BROKER_KEY_OF = {
    "segment.bytes": "log.segment.bytes", "segment.ms": "log.roll.ms", "segment.jitter.ms": "log.roll.jitter.ms",
    "segment.index.bytes": "log.index.size.max.bytes", "index.interval.bytes": "log.index.interval.bytes",
    "flush.messages": "log.flush.interval.messages", "flush.ms": "log.flush.interval.ms",
    "retention.ms": "log.retention.ms", "retention.bytes": "log.retention.bytes",
    "file.delete.delay.ms": "log.segment.delete.delay.ms", "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type", "cleanup.policy": "log.cleanup.policy",
    "delete.retention.ms": "log.cleaner.delete.retention.ms", "preallocate": "log.preallocate",
}


def config_type(value: str) -> int:
    if value in ("true", "false"):
        return _BOOLEAN
    try:
        int(value)
        return _LONG
    except ValueError:
        return _STRING


def topic_config_entries(ctx, topic: str, overrides: dict):
    """(name, value, source, type) for every topic setting, effective values."""
    effective = ctx.config.log.with_overrides(overrides).topic_properties()
    for name, value in sorted(effective.items()):
        if name in overrides:
            source = TOPIC_CONFIG
        elif _BROKER_KEY_OF.get(name) in ctx.config.props:
            source = STATIC_BROKER_CONFIG
        else:
            source = DEFAULT_CONFIG
        yield name, value, source, config_type(value)


def broker_config_entries(ctx):
    """(name, value, source, type) for the broker's own settings."""
    props = ctx.config.props
    for name, value in sorted(ctx.config.values.items()):
        if value is None:
            continue
        text = str(value).lower() if isinstance(value, bool) else str(value)
        yield name, text, STATIC_BROKER_CONFIG if name in props else DEFAULT_CONFIG, config_type(text)
    for topic_key, value in sorted(ctx.config.log.topic_properties().items()):
        name = _BROKER_KEY_OF.get(topic_key)
        if name is not None:
            yield name, value, STATIC_BROKER_CONFIG if name in props else DEFAULT_CONFIG, config_type(value)
