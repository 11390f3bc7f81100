"""hpbroker: a Kafka-compatible log broker, with Kafka's on-disk layout."""

__version__ = "0.1.0"
