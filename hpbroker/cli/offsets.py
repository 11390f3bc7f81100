"""``hpbroker offsets TOPIC``: earliest and latest offset of each partition, and
with ``--time`` the first offset at or after that time (ListOffsets)."""


from hpbroker.cli import output
from hpbroker.cli.connection import CliError, add_connection_args, connect, guarded
from hpbroker.cli.partition_offsets import at_time, earliest_latest, topic_partitions
from hpbroker.cli.timestamps import parse_time_ms

PREFIX = "hpbroker offsets"


def add_parser(sub) -> None:
    parser = sub.add_parser("offsets", help="earliest/latest offsets of a topic's partitions, or offsets for a time")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--partition", type=int, action="append", metavar="N", help="only this partition (repeatable)")
    parser.add_argument("--time", metavar="TIME", help="also look up the offset for this time: ISO 8601 or epoch ms")
    add_connection_args(parser)
    parser.set_defaults(run=lambda args: guarded(PREFIX, show_offsets, args))


def show_offsets(args) -> int:
    when = parse_time_ms(args.time) if args.time is not None else None
    admin = connect(args)
    partitions = topic_partitions(admin, [args.topic], args.timeout)
    if args.partition:
        missing = set(args.partition) - {p for _, p in partitions}
        if missing:
            raise CliError(f"topic {args.topic!r} has no partition {min(missing)}")
        partitions = [tp for tp in partitions if tp[1] in set(args.partition)]
    earliest, latest = earliest_latest(admin, partitions, args.timeout)
    timed = at_time(admin, partitions, when, args.timeout) if when is not None else {}
    rows = []
    for tp in partitions:
        row = {"topic": tp[0], "partition": tp[1], "earliest": earliest[tp], "latest": latest[tp]}
        if when is not None:
            # None: no record at or after that time; the next one written will be at `latest`
            row["offset_for_time"] = timed[tp] if timed[tp] >= 0 else None
        rows.append(row)
    if args.json:
        output.emit_json(rows)
    else:
        columns = ["TOPIC", "PARTITION", "EARLIEST", "LATEST"] + (["OFFSET-FOR-TIME"] if when is not None else [])
        output.table(columns, [list(r.values()) for r in rows])
    return 0
