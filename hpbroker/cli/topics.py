"""``hpbroker topics list|describe|create|delete|alter-config`` over the Kafka admin APIs."""

import uuid

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

from hpbroker.cli import output
from hpbroker.cli.connection import (
    CliError,
    add_connection_args,
    connect,
    error_text,
    guarded,
    parse_pairs,
    result,
)
from hpbroker.cli.partition_offsets import earliest_latest
from hpbroker.storage.checkpoints import kafka_uuid_string

PREFIX = "hpbroker topics"


def add_parser(sub) -> None:
    parser = sub.add_parser("topics", help="list, describe, create, delete topics and change their configs")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    p = actions.add_parser("list", help="topic names with partition counts")
    p.add_argument("--internal", action="store_true", help="include internal topics (names starting with __)")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=list_topics)

    p = actions.add_parser("describe", help="partitions, leaders, replicas, ISR, offsets and non-default configs")
    p.add_argument("topics", nargs="*", metavar="TOPIC", help="topics to describe (default: all)")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=describe_topics)

    p = actions.add_parser("create", help="create a topic")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, default=-1,
                   help="number of partitions (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, default=-1,
                   help="replicas per partition (default: the broker's default.replication.factor)")
    p.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="topic config (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="succeed when the topic already exists")
    add_connection_args(p, json_flag=False)
    p.set_defaults(run=run, action_fn=create_topic)

    p = actions.add_parser("delete", help="delete topics")
    p.add_argument("topics", nargs="+", metavar="TOPIC")
    p.add_argument("--if-exists", action="store_true", help="succeed when a topic does not exist")
    add_connection_args(p, json_flag=False)
    p.set_defaults(run=run, action_fn=delete_topics)

    p = actions.add_parser("alter-config", help="set or delete topic configs (IncrementalAlterConfigs)")
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="set a config (repeatable)")
    p.add_argument("--delete", action="append", default=[], metavar="KEY", help="back to the default (repeatable)")
    add_connection_args(p, json_flag=False)
    p.set_defaults(run=run, action_fn=alter_config)


def run(args) -> int:
    return guarded(PREFIX, _connected(args.action_fn), args)


def _connected(action):
    def with_admin(args):
        return action(args, connect(args))
    return with_admin


def list_topics(args, admin) -> int:
    metadata = admin.list_topics(timeout=args.timeout)
    rows = []
    for name in sorted(metadata.topics):
        if name.startswith("__") and not args.internal:
            continue
        meta = metadata.topics[name]
        replication = max((len(p.replicas) for p in meta.partitions.values()), default=0)
        rows.append({"topic": name, "partitions": len(meta.partitions), "replication_factor": replication})
    if args.json:
        output.emit_json(rows)
    else:
        output.table(["TOPIC", "PARTITIONS", "REPLICATION-FACTOR"], [list(r.values()) for r in rows])
    return 0


def describe_topics(args, admin) -> int:
    names = args.topics or sorted(n for n in admin.list_topics(timeout=args.timeout).topics if not n.startswith("__"))
    if not names:
        return _print_described(args, [])
    live = set(admin.list_topics(timeout=args.timeout).brokers)
    futures = admin.describe_topics(TopicCollection(names), request_timeout=args.timeout)
    described = [_described(futures[name], name, args.timeout) for name in names]
    partitions = [(d.name, p.id) for d in described for p in d.partitions]
    earliest, latest = earliest_latest(admin, partitions, args.timeout)
    configs = _non_default_configs(admin, names, args.timeout)
    topics = []
    for d in described:
        topics.append({
            "topic": d.name,
            "topic_id": _kafka_topic_id(d.topic_id),
            "partition_count": len(d.partitions),
            "replication_factor": max((len(p.replicas) for p in d.partitions), default=0),
            "configs": configs.get(d.name, {}),
            "partitions": [{
                "partition": p.id,
                "leader": p.leader.id if p.leader is not None else None,
                "replicas": [n.id for n in p.replicas],
                "isr": [n.id for n in p.isr],
                "offline": [n.id for n in p.replicas if n.id not in live],
                "log_start_offset": earliest[(d.name, p.id)],
                "log_end_offset": latest[(d.name, p.id)],
            } for p in sorted(d.partitions, key=lambda p: p.id)],
        })
    return _print_described(args, topics)


def _described(future, name: str, timeout: float):
    try:
        return future.result(timeout=timeout + 1)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise CliError(f"topic {name!r} does not exist") from None
        raise CliError(error_text(exc.args[0], f"topic {name!r}")) from None


def _non_default_configs(admin, names, timeout: float) -> dict:
    """``{topic: {key: value}}`` for configs set on the topic (not broker or built-in defaults)."""
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names], request_timeout=timeout)
    found = {}
    for resource, future in futures.items():
        entries = result(future, timeout, f"configs of {resource.name!r}")
        found[resource.name] = {k: ("<sensitive>" if e.is_sensitive else e.value)
                                for k, e in sorted(entries.items()) if not e.is_default}
    return found


def _print_described(args, topics) -> int:
    if args.json:
        output.emit_json(topics)
        return 0
    for i, t in enumerate(topics):
        if i:
            output.line()
        configs = ",".join(f"{k}={v}" for k, v in t["configs"].items()) or "-"
        output.line(f"Topic: {t['topic']}  TopicId: {t['topic_id']}  PartitionCount: {t['partition_count']}  "
                    f"ReplicationFactor: {t['replication_factor']}  Configs: {configs}")
        output.table(["PARTITION", "LEADER", "REPLICAS", "ISR", "OFFLINE", "LOG-START-OFFSET", "LOG-END-OFFSET"],
                     [[p["partition"], p["leader"], p["replicas"], p["isr"], p["offline"] or "-", p["log_start_offset"],
                       p["log_end_offset"]] for p in t["partitions"]])
    return 0


def create_topic(args, admin) -> int:
    topic = NewTopic(args.topic, num_partitions=args.partitions, replication_factor=args.replication_factor,
                     config=parse_pairs(args.config, "--config"))
    future = admin.create_topics([topic], operation_timeout=args.timeout, request_timeout=args.timeout)[args.topic]
    try:
        future.result(timeout=args.timeout + 1)
    except KafkaException as exc:
        if not (args.if_not_exists and exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS):
            raise CliError(_admin_error(exc, f"cannot create topic {args.topic!r}")) from None
        print(f"Topic {args.topic} already exists.")
        return 0
    print(f"Created topic {args.topic}.")
    return 0


def delete_topics(args, admin) -> int:
    futures = admin.delete_topics(args.topics, operation_timeout=args.timeout, request_timeout=args.timeout)
    for name in args.topics:
        try:
            futures[name].result(timeout=args.timeout + 1)
        except KafkaException as exc:
            if args.if_exists and exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                continue
            raise CliError(_admin_error(exc, f"cannot delete topic {name!r}")) from None
        print(f"Deleted topic {name}.")
    return 0


def alter_config(args, admin) -> int:
    changes = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in parse_pairs(args.set, "--set").items()]
    changes += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE) for k in args.delete]
    if not changes:
        raise CliError("nothing to change: give --set KEY=VALUE or --delete KEY")
    resource = ConfigResource(ResourceType.TOPIC, args.topic, incremental_configs=changes)
    future = admin.incremental_alter_configs([resource], request_timeout=args.timeout)[resource]
    try:
        future.result(timeout=args.timeout + 1)
    except KafkaException as exc:
        if exc.args[0].code() == KafkaError._UNSUPPORTED_FEATURE:
            raise CliError("the broker does not support IncrementalAlterConfigs (API key 44), "
                           "so topic configs cannot be changed") from None
        raise CliError(_admin_error(exc, f"cannot alter configs of {args.topic!r}")) from None
    print(f"Altered configs of topic {args.topic}.")
    return 0


def _admin_error(exc: KafkaException, what: str) -> str:
    error = exc.args[0]
    if error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
        return f"{what}: it already exists"
    if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return f"{what}: no such topic"
    return f"{what}: {error.str()}"


def _kafka_topic_id(topic_id) -> str:
    """As Kafka's tools print it: URL-safe base64 without padding (confluent's
    own str() uses the standard alphabet, with + and /)."""
    high = topic_id.get_most_significant_bits() & (1 << 64) - 1
    low = topic_id.get_least_significant_bits() & (1 << 64) - 1
    return kafka_uuid_string(uuid.UUID(int=high << 64 | low))
