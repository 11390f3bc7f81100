"""``hpbroker acls list|add|remove``: the ACLs a broker with an authorizer
decides by, through DescribeAcls, CreateAcls and DeleteAcls (what
``kafka-acls --bootstrap-server`` does, with its flag names).

    hpbroker acls add --allow-principal User:alice --operation Write --topic orders
    hpbroker acls add --allow-principal User:bob --consumer --topic orders --group billing
    hpbroker acls list --topic orders
    hpbroker acls remove --allow-principal User:bob --topic orders

``--producer`` stands for WRITE, DESCRIBE and CREATE on the topics (and, with
``--transactional-id``, WRITE and DESCRIBE on it; with ``--idempotent``,
IDEMPOTENT_WRITE on the cluster); ``--consumer`` for READ and DESCRIBE on the
topics and READ on the groups: Kafka's conveniences.  ``remove`` with no
principal or operation removes every ACL of the resources named.
"""

from __future__ import annotations

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.static.primitive import i8

from hpbroker.cli import output
from hpbroker.cli.connection import CliError, add_connection_args, command_config, connect, error_text, guarded
from hpbroker.cli.kafka_requests import Brokers, build, error_name, request_module, security_of
from hpbroker.errors import ErrorCode
from hpbroker.security.acls import (
    OPERATIONS_OF,
    RESOURCE_NAMES,
    AclError,
    Operation,
    PatternType,
    Permission,
    ResourceType as AclResourceType,
    operation_named,
)

PREFIX = "hpbroker acls"
DESCRIBE_ACLS = 29
CLUSTER_NAME = "kafka-cluster"
PATTERNS = {"literal": ResourcePatternType.LITERAL, "prefixed": ResourcePatternType.PREFIXED,
            "any": ResourcePatternType.ANY, "match": ResourcePatternType.MATCH}


def add_parser(sub) -> None:
    parser = sub.add_parser("acls", help="list, add and remove ACLs (with authorizer.class.name set)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    p = actions.add_parser("list", help="the ACLs, of the resources named or all")
    _resource_args(p)
    p.add_argument("--principal", metavar="PRINCIPAL", help="only this principal's ACLs (User:alice)")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=list_acls)
    for name, fn, text in (("add", add_acls, "add ACLs: who may (or may not) do what on the resources named"),
                           ("remove", remove_acls, "remove the ACLs matching the flags given")):
        p = actions.add_parser(name, help=text)
        _resource_args(p)
        _entry_args(p)
        add_connection_args(p, json_flag=False)
        p.set_defaults(run=run, action_fn=fn)


def _resource_args(p) -> None:
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC", help="a topic (repeatable; '*': all)")
    p.add_argument("--group", action="append", default=[], metavar="GROUP", help="a group (repeatable; '*': all)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID",
                   help="a transactional id (repeatable; '*': all)")
    p.add_argument("--cluster", action="store_true", help="the cluster")
    p.add_argument("--resource-pattern-type", type=str.lower, choices=sorted(PATTERNS), metavar="TYPE",
                   help="literal (default for add), prefixed, or for list and remove also any (their default) "
                        "or match")


def _entry_args(p) -> None:
    p.add_argument("--allow-principal", action="append", default=[], metavar="PRINCIPAL",
                   help="User:alice (repeatable; User:* for everyone)")
    p.add_argument("--deny-principal", action="append", default=[], metavar="PRINCIPAL", help="as --allow-principal")
    p.add_argument("--allow-host", action="append", default=[], metavar="IP", help="from this address only "
                                                                                      "(default: any)")
    p.add_argument("--deny-host", action="append", default=[], metavar="IP", help="as --allow-host")
    p.add_argument("--operation", action="append", default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
                        "AlterConfigs, IdempotentWrite, All (repeatable)")
    p.add_argument("--producer", action="store_true", help="what a producer needs on the topics")
    p.add_argument("--consumer", action="store_true", help="what a consumer needs on the topics and groups")
    p.add_argument("--idempotent", action="store_true", help="with --producer: IDEMPOTENT_WRITE on the cluster")


def run(args) -> int:
    def with_admin(args):
        if args.action_fn is list_acls:
            return list_acls(args)
        return args.action_fn(args, connect(args))
    return guarded(PREFIX, with_admin, args)


def _resources(args, default_pattern: str) -> list[tuple[ResourceType, str, ResourcePatternType]]:
    pattern = PATTERNS[args.resource_pattern_type or default_pattern]
    found = [(ResourceType.TOPIC, t, pattern) for t in args.topic]
    found += [(ResourceType.GROUP, g, pattern) for g in args.group]
    found += [(ResourceType.TRANSACTIONAL_ID, x, pattern) for x in args.transactional_id]
    if args.cluster:
        found.append((ResourceType.BROKER, CLUSTER_NAME, ResourcePatternType.LITERAL))
    return found


def _operation(text: str) -> AclOperation:
    try:
        return AclOperation[operation_named(text).name]
    except AclError as exc:
        raise CliError(str(exc)) from None


def _operations_for(args, kind: ResourceType) -> list[AclOperation]:
    """The operations the flags ask for on a resource of this kind."""
    ops = [_operation(o) for o in args.operation]
    if args.producer:
        ops += {ResourceType.TOPIC: [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE],
                ResourceType.TRANSACTIONAL_ID: [AclOperation.WRITE, AclOperation.DESCRIBE],
                ResourceType.BROKER: [AclOperation.IDEMPOTENT_WRITE] if args.idempotent else []}.get(kind, [])
    if args.consumer:
        ops += {ResourceType.TOPIC: [AclOperation.READ, AclOperation.DESCRIBE],
                ResourceType.GROUP: [AclOperation.READ]}.get(kind, [])
    return list(dict.fromkeys(ops))


def _entries(args) -> list[tuple[str, str, AclPermissionType]]:
    found = []
    for principals, hosts, permission in ((args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
                                          (args.deny_principal, args.deny_host, AclPermissionType.DENY)):
        for principal in principals:
            if ":" not in principal:
                raise CliError(f"principal {principal!r}: expected Type:name, e.g. User:{principal}")
            found += [(principal, host, permission) for host in hosts or ["*"]]
    return found


def add_acls(args, admin) -> int:
    if args.producer and args.idempotent:
        args.cluster = True
    resources = _resources(args, "literal")
    if any(p in (ResourcePatternType.ANY, ResourcePatternType.MATCH) for _, _, p in resources):
        raise CliError("add takes --resource-pattern-type literal or prefixed")
    entries = _entries(args)
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not entries:
        raise CliError("name who: --allow-principal or --deny-principal")
    for kind, name, _pattern in resources:  # refused before anything is sent, as kafka-acls refuses it
        wrong = [op.name for op in _operations_for(args, kind)
                 if op != AclOperation.ALL and Operation[op.name] not in OPERATIONS_OF[AclResourceType(kind.value)]]
        if wrong:
            raise CliError(f"{_type_name(kind.value).lower()} {name!r} has no operation {', '.join(wrong)} (it has "
                           f"{', '.join(o.name for o in OPERATIONS_OF[AclResourceType(kind.value)])}, and ALL)")
    bindings = [AclBinding(kind, name, pattern, principal, host, op, permission)
                for kind, name, pattern in resources for op in _operations_for(args, kind)
                for principal, host, permission in entries]
    if not bindings:
        raise CliError("name what: --operation, --producer or --consumer")
    _wait(admin.create_acls(bindings, request_timeout=args.timeout), args)
    for binding in bindings:
        output.line(f"added: {_describe(binding)}")
    return 0


def remove_acls(args, admin) -> int:
    resources = _resources(args, "literal")
    if not resources:
        raise CliError("name a resource: --topic, --group, --transactional-id or --cluster")
    # no principal named: every principal's and host's (None matches any in a filter)
    entries: list[tuple] = list(_entries(args)) or [(None, None, AclPermissionType.ANY)]
    filters = []
    for kind, name, pattern in resources:
        ops = _operations_for(args, kind) or [AclOperation.ANY]
        filters += [AclBindingFilter(kind, name, pattern, principal, host, op, permission)
                    for op in ops for principal, host, permission in entries]
    removed = [b for result in _wait(admin.delete_acls(filters, request_timeout=args.timeout), args)
               for b in result]
    for binding in removed:
        output.line(f"removed: {_describe(binding)}")
    if not removed:
        output.line("no ACL matched")
    return 0


def list_acls(args) -> int:
    """DescribeAcls sent here, not through librdkafka: its admin client drops
    the answer's error, so a refusal (CLUSTER_AUTHORIZATION_FAILED) or a broker
    without an authorizer (SECURITY_DISABLED) would read as no ACLs at all."""
    resources = _resources(args, "any") or [(ResourceType.ANY, None, PATTERNS[args.resource_pattern_type or "any"])]
    rows: set[tuple] = set()
    with Brokers(args.bootstrap_server, args.timeout, security_of(command_config(args))) as brokers:
        conn = brokers.bootstrap
        version = conn.version(DESCRIBE_ACLS, "DescribeAcls", 1, 3)
        m = request_module(DESCRIBE_ACLS, version)
        for kind, name, pattern in resources:
            answer = conn.request(build(m.DescribeAclsRequest, resource_type_filter=i8(int(kind.value)),
                                        resource_name_filter=name, pattern_type_filter=i8(int(pattern.value)),
                                        principal_filter=args.principal, host_filter=None,
                                        operation=i8(int(AclOperation.ANY.value)),
                                        permission_type=i8(int(AclPermissionType.ANY.value))))
            if answer.error_code != ErrorCode.none:
                raise CliError(f"{error_name(answer.error_code)}: {answer.error_message or ''}".rstrip(": "))
            for r in answer.resources:
                for acl in r.acls:
                    rows.add((_type_name(r.resource_type), r.resource_name, _enum_name(PatternType, r.pattern_type),
                              acl.principal, acl.host, _enum_name(Operation, acl.operation),
                              _enum_name(Permission, acl.permission_type)))
    ordered = sorted(rows)
    if args.json:
        output.emit_json([dict(zip(("resource_type", "name", "pattern", "principal", "host", "operation",
                                    "permission"), row)) for row in ordered])
    else:
        output.table(["TYPE", "NAME", "PATTERN", "PRINCIPAL", "HOST", "OPERATION", "PERMISSION"],
                     [list(row) for row in ordered])
    return 0


def _type_name(code: int) -> str:
    """Kafka's name of a resource type (librdkafka calls CLUSTER, code 4, BROKER)."""
    try:
        return RESOURCE_NAMES[AclResourceType(code)]
    except (KeyError, ValueError):
        return f"type {code}"


def _enum_name(cls, code: int) -> str:
    try:
        return cls(code).name
    except ValueError:
        return str(code)


def _wait(futures: dict, args) -> list:
    results = []
    for future in futures.values():
        try:
            results.append(future.result(timeout=args.timeout + 1))
        except KafkaException as exc:
            raise CliError(error_text(exc.args[0])) from None
    return results


def _row(binding) -> list:
    return [_type_name(binding.restype.value), binding.name,
            binding.resource_pattern_type.name, binding.principal, binding.host, binding.operation.name,
            binding.permission_type.name]


def _describe(binding) -> str:
    kind, name, pattern, principal, host, op, permission = _row(binding)
    prefixed = " (prefixed)" if pattern == "PREFIXED" else ""
    return f"{principal} {permission} {op} on {kind} {name}{prefixed} from {host}"
