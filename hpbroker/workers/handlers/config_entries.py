"""Config entries as DescribeConfigs / CreateTopics show them: value and source."""

from hpbroker.storage.config import broker_key_of, broker_log_properties

# Kafka's ConfigResource types (DescribeConfigs, AlterConfigs).
TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
# Kafka's ConfigSource ids.
TOPIC_CONFIG = 1
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
# Kafka's ConfigType ids.
_BOOLEAN, _STRING, _LONG = 1, 2, 5


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
        elif broker_key_of(name) in ctx.config.props:
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
    for name, value in sorted(broker_log_properties(ctx.config.log).items()):
        yield name, value, STATIC_BROKER_CONFIG if name in props else DEFAULT_CONFIG, config_type(value)
