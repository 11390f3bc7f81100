"""What the three ACL APIs share: reading a request's binding or filter, and
Kafka's answer when no authorizer is set.  (Whether the caller may act, DESCRIBE
or ALTER on the cluster, is decided before the handler: ``guards.py``.)"""

from kio.static.primitive import i8

from hpbroker.errors import ErrorCode
from hpbroker.security.acl_store import AclStoreError
from hpbroker.security.acls import (
    AclError,
    Binding,
    Entry,
    Filter,
    Operation,
    PatternType,
    Permission,
    Resource,
    ResourceType,
)

NO_AUTHORIZER = "No Authorizer is configured on the broker (authorizer.class.name)"


def refusal(ctx) -> tuple[ErrorCode, str] | None:
    """Kafka's whole-request answer with no authorizer (SECURITY_DISABLED); None to go on."""
    if not ctx.access.enabled:
        return ErrorCode.security_disabled, NO_AUTHORIZER
    return None


def _enum(cls, value: int, what: str):
    try:
        return cls(value)
    except ValueError:
        raise AclError(f"unknown {what} {value}") from None


def binding_of(creation) -> Binding:
    return Binding(Resource(_enum(ResourceType, creation.resource_type, "resource type"), creation.resource_name,
                            _enum(PatternType, creation.resource_pattern_type, "pattern type")),
                   Entry(creation.principal, creation.host, _enum(Operation, creation.operation, "operation"),
                         _enum(Permission, creation.permission_type, "permission")))


def filter_of(request) -> Filter:
    """A DescribeAcls request's or a DeleteAcls filter's (the same fields)."""
    return Filter(_enum(ResourceType, request.resource_type_filter, "resource type"), request.resource_name_filter,
                  _enum(PatternType, request.pattern_type_filter, "pattern type"), request.principal_filter,
                  request.host_filter, _enum(Operation, request.operation, "operation"),
                  _enum(Permission, request.permission_type, "permission")).check()


def store_error(exc: AclStoreError) -> ErrorCode:
    """ZooKeeper away is worth a retry; anything else is the server's trouble."""
    return ErrorCode.request_timed_out if exc.retriable else ErrorCode.unknown_server_error


def wire(value) -> i8:
    return i8(int(value))
