"""``hpbroker groups list|describe|reset-offsets`` over the consumer-group admin
APIs (ListGroups, ConsumerGroupDescribe or DescribeGroups, OffsetFetch,
OffsetCommit), like kafka-consumer-groups.  A group's type is its protocol:
Classic, or Consumer (KIP-848)."""

import argparse
import sys

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition

from hpbroker.cli import output, reset_plan
from hpbroker.cli.connection import (
    CliError,
    add_connection_args,
    connect,
    error_text,
    guarded,
)
from hpbroker.cli.partition_offsets import at_time, earliest_latest, topic_partitions
from hpbroker.cli.timestamps import parse_time_ms

PREFIX = "hpbroker groups"
_INACTIVE = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)


def add_parser(sub) -> None:
    parser = sub.add_parser("groups", help="list and describe consumer groups, reset their offsets")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    p = actions.add_parser("list", help="consumer groups with their state")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=list_groups)

    p = actions.add_parser("describe", help="members, assignment, committed offsets and lag per partition")
    p.add_argument("groups", nargs="+", metavar="GROUP")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=describe_groups)

    p = actions.add_parser("reset-offsets", help="move a group's committed offsets (dry run unless --execute)")
    p.add_argument("group", metavar="GROUP")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]",
                       help="reset this topic, or only these partitions of it (repeatable)")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-earliest", action="store_const", dest="strategy", const=("earliest", None))
    target.add_argument("--to-latest", action="store_const", dest="strategy", const=("latest", None))
    target.add_argument("--to-offset", type=_tagged_int("offset"), dest="strategy", metavar="N")
    target.add_argument("--to-datetime", type=lambda s: ("datetime", s), dest="strategy", metavar="ISO",
                        help="first offset at or after this time (ISO 8601 or epoch ms)")
    target.add_argument("--shift-by", type=_tagged_int("shift"), dest="strategy", metavar="N",
                        help="move the committed offset by N (negative: back)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only show the new offsets (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=reset_offsets)


def _tagged_int(strategy: str):
    """An argparse type giving (strategy, N), so one dest holds the chosen target."""
    def parse(text: str):
        try:
            return strategy, int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"want an integer, got {text!r}") from None
    return parse


def run(args) -> int:
    def with_admin(args):
        return args.action_fn(args, connect(args))
    return guarded(PREFIX, with_admin, args)


def _unsupported(error: KafkaError, api: str) -> CliError:
    if error.code() == KafkaError._UNSUPPORTED_FEATURE:
        return CliError(f"the broker does not support {api}")
    return CliError(error_text(error))


def list_groups(args, admin) -> int:
    try:
        listed = admin.list_consumer_groups(request_timeout=args.timeout).result(timeout=args.timeout + 1)
    except KafkaException as exc:
        raise _unsupported(exc.args[0], "ListGroups") from None
    if listed.errors and not listed.valid:
        raise _unsupported(listed.errors[0], "ListGroups")
    rows = [{"group": g.group_id, "type": _name(g.type), "state": _name(g.state),
             "simple": g.is_simple_consumer_group}
            for g in sorted(listed.valid, key=lambda g: g.group_id)]
    if args.json:
        output.emit_json(rows)
    else:
        output.table(["GROUP", "TYPE", "STATE"], [[r["group"], r["type"], r["state"]] for r in rows])
    return 0


# Kafka's own spelling of the states, as kafka-consumer-groups prints them
_STATE_NAMES = {ConsumerGroupState.PREPARING_REBALANCING: "PreparingRebalance",
                ConsumerGroupState.COMPLETING_REBALANCING: "CompletingRebalance"}


def _name(state) -> str:
    return _STATE_NAMES.get(state) or getattr(state, "name", str(state)).title().replace("_", "")


def _describe(admin, group: str, timeout: float):
    future = admin.describe_consumer_groups([group], request_timeout=timeout)[group]
    try:
        return future.result(timeout=timeout + 1)
    except KafkaException as exc:
        raise _unsupported(exc.args[0], "DescribeGroups") from None


def _committed(admin, group: str, timeout: float) -> dict:
    """``{(topic, partition): committed offset}`` (OffsetFetch for every partition)."""
    future = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group]
    try:
        answer = future.result(timeout=timeout + 1)
    except KafkaException as exc:
        raise _unsupported(exc.args[0], "OffsetFetch") from None
    return {(tp.topic, tp.partition): tp.offset for tp in answer.topic_partitions if tp.error is None}


def describe_groups(args, admin) -> int:
    described = [_group_report(admin, g, args.timeout) for g in args.groups]
    if args.json:
        output.emit_json(described)
        return 0
    for i, g in enumerate(described):
        if i:
            output.line()
        output.line(f"Group: {g['group']}  Type: {g['type']}  State: {g['state']}  Assignor: {g['assignor'] or '-'}  "
                    f"Members: {len(g['members'])}  Coordinator: {g['coordinator']}")
        output.table(["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                      "CONSUMER-ID", "HOST", "CLIENT-ID"],
                     [[p["topic"], p["partition"], p["committed_offset"], p["log_end_offset"], p["lag"],
                       p["consumer_id"], p["host"], p["client_id"]] for p in g["partitions"]])
        idle = [m for m in g["members"] if not m["assignment"]]
        if idle:
            output.line(f"Members without partitions: {', '.join(m['consumer_id'] for m in idle)}")
    return 0


def _group_report(admin, group: str, timeout: float) -> dict:
    description = _describe(admin, group, timeout)
    committed = _committed(admin, group, timeout)
    if description.state == ConsumerGroupState.DEAD and not description.members and not committed:
        raise CliError(f"consumer group {group!r} does not exist")
    owner = {}
    members = []
    for m in description.members:
        assigned = sorted((tp.topic, tp.partition) for tp in (m.assignment.topic_partitions if m.assignment else []))
        members.append({"consumer_id": m.member_id, "client_id": m.client_id, "host": m.host,
                        "assignment": [f"{t}[{p}]" for t, p in assigned]})
        owner.update({tp: m for tp in assigned})
    partitions = sorted(set(committed) | set(owner))
    _, latest = earliest_latest(admin, partitions, timeout)
    rows = []
    for tp in partitions:
        current, end, m = committed.get(tp, -1), latest[tp], owner.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1],
                     "committed_offset": current if current >= 0 else None, "log_end_offset": end,
                     "lag": end - current if current >= 0 else None,
                     "consumer_id": m.member_id if m else None, "host": m.host if m else None,
                     "client_id": m.client_id if m else None})
    coordinator = description.coordinator
    return {"group": group, "type": _name(description.type), "state": _name(description.state),
            "assignor": description.partition_assignor,
            "coordinator": f"{coordinator.id} ({coordinator.host}:{coordinator.port})" if coordinator else None,
            "members": members, "partitions": rows}


def reset_offsets(args, admin) -> int:
    strategy, value = args.strategy
    when = parse_time_ms(value) if strategy == "datetime" else None
    description = _describe(admin, args.group, args.timeout)
    if args.execute and description.state not in _INACTIVE:
        raise CliError(f"offsets of group {args.group!r} can only be reset while it is inactive, "
                       f"but it is {_name(description.state)} with {len(description.members)} members")
    committed = _committed(admin, args.group, args.timeout)
    partitions = sorted(committed) if args.all_topics else _chosen_partitions(admin, args.topic, args.timeout)
    if not partitions:
        raise CliError(f"group {args.group!r} has no committed offsets to reset")
    earliest, latest = earliest_latest(admin, partitions, args.timeout)
    timed = at_time(admin, partitions, when, args.timeout) if when is not None else {}
    targets = reset_plan.plan(partitions, strategy, value, committed, earliest, latest, timed)
    if args.execute:
        _commit(admin, args.group, targets, args.timeout)
    rows = [{"group": args.group, "topic": t, "partition": p,
             "current_offset": committed.get((t, p), -1) if committed.get((t, p), -1) >= 0 else None,
             "new_offset": targets[(t, p)]} for t, p in partitions]
    if args.json:
        output.emit_json(rows)
    else:
        output.table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET"], [list(r.values()) for r in rows])
    if not args.execute:
        print("Dry run: nothing was changed; add --execute to commit these offsets.", file=sys.stderr)
    return 0


def _chosen_partitions(admin, specs, timeout: float) -> list:
    """``--topic T`` -> all of T's partitions; ``--topic T:0,2`` -> those two (checked to exist)."""
    chosen = []
    for spec in specs:
        topic, _, listed = spec.partition(":")
        every = topic_partitions(admin, [topic], timeout)
        if not listed:
            chosen += every
            continue
        try:
            wanted = {int(p) for p in listed.split(",")}
        except ValueError:
            raise CliError(f"bad --topic {spec!r}: want TOPIC or TOPIC:P,P") from None
        missing = wanted - {p for _, p in every}
        if missing:
            raise CliError(f"topic {topic!r} has no partition {min(missing)}")
        chosen += [(topic, p) for p in sorted(wanted)]
    return sorted(set(chosen))


def _commit(admin, group: str, targets: dict, timeout: float) -> None:
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in sorted(targets.items())])
    future = admin.alter_consumer_group_offsets([request], request_timeout=timeout)[group]
    try:
        answer = future.result(timeout=timeout + 1)
    except KafkaException as exc:
        raise _unsupported(exc.args[0], "OffsetCommit") from None
    failed = [tp for tp in answer.topic_partitions if tp.error is not None]
    if failed:
        tp = failed[0]
        raise CliError(f"cannot commit {tp.topic}[{tp.partition}]: {error_text(tp.error)}")
