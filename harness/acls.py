"""ACL filters for confluent-kafka's admin client, as the tests and
benchmarks build them: its type hints want strings where None (any) is
what a filter means."""

from typing import Any

from confluent_kafka.admin import AclBindingFilter


def acl_filter(*parts: Any) -> AclBindingFilter:
    """(resource type, name, pattern type, principal, host, operation, permission); None matches any."""
    return AclBindingFilter(*parts)
