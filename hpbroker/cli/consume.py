"""``hpbroker consume TOPIC``: the console consumer.

Without ``--group`` it reads by assignment (every partition, or ``--partition``)
and commits nothing; with ``--group`` it joins that consumer group and commits
as it goes, like kafka-console-consumer; with ``--zookeeper`` as well, the
group is a ZooKeeper-coordinated one (see zk_consume).  ``--exit-at-end`` stops once every
assigned partition has been read to its end.
"""

import json
import signal
import sys
import uuid

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from hpbroker.cli import zk_consume
from hpbroker.cli.connection import CliError, add_connection_args, client_config, connect, error_text, guarded
from hpbroker.cli.message_format import as_json, compile_format
from hpbroker.cli.partition_offsets import topic_partitions

PREFIX = "hpbroker consume"


def add_parser(sub) -> None:
    parser = sub.add_parser("consume", help="console consumer: print records of a topic")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--from-beginning", action="store_true", help="start at the earliest offset, not the end")
    parser.add_argument("--partition", type=int, action="append", metavar="N",
                        help="read only this partition (repeatable)")
    parser.add_argument("--offset", metavar="N|earliest|latest",
                        help="start offset for each partition read (negative N: that many before the end)")
    parser.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    parser.add_argument("--group", metavar="GROUP", help="consume as a member of this group and commit offsets")
    parser.add_argument("--format", default="%s\\n", metavar="FMT",
                        help="kcat-style: %%t topic %%p partition %%o offset %%k key %%s value %%T timestamp "
                             "%%h headers %%K/%%S key/value length (default '%%s\\n')")
    parser.add_argument("--exit-at-end", action="store_true", help="exit when the end of every partition is reached")
    zk_consume.add_arguments(parser)
    add_connection_args(parser, json_help="print one JSON object per record (overrides --format)")
    parser.set_defaults(run=lambda args: guarded(PREFIX, consume, args))


def consume(args) -> int:
    render = compile_format(args.format) if not args.json else None
    if args.zookeeper:
        return zk_consume.consume(args, render)
    if args.dual_commit or args.offsets_storage != "zookeeper":
        raise CliError("--offsets-storage and --dual-commit need --zookeeper")
    start = _start_offset(args)
    partitions = topic_partitions(connect(args), [args.topic], args.timeout)
    if args.partition:
        missing = set(args.partition) - {p for _, p in partitions}
        if missing:
            raise CliError(f"topic {args.topic!r} has no partition {min(missing)}")
        partitions = [tp for tp in partitions if tp[1] in set(args.partition)]
    consumer = Consumer(client_config(args, **{
        # librdkafka wants a group id even for assign(); a throwaway one commits nothing
        "group.id": args.group or f"hpbroker-console-{uuid.uuid4().hex[:12]}",
        "enable.auto.commit": bool(args.group),
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "enable.partition.eof": args.exit_at_end,
    }))
    # SIGTERM ends the loop like Ctrl-C, so close() still commits and leaves the group
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if args.group and not args.partition and args.offset is None:
            consumer.subscribe([args.topic])
        else:
            consumer.assign([TopicPartition(t, p, start) for t, p in partitions])
        return _loop(consumer, args, render)
    finally:
        consumer.close()


def _start_offset(args) -> int:
    if args.offset is None:
        return OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    named = {"earliest": OFFSET_BEGINNING, "beginning": OFFSET_BEGINNING, "latest": OFFSET_END, "end": OFFSET_END}
    if args.offset in named:
        return named[args.offset]
    try:
        offset = int(args.offset)
    except ValueError:
        raise CliError(f"bad --offset {args.offset!r}: want a number, earliest or latest") from None
    # librdkafka's logical offset "N from the end" is OFFSET_TAIL_BASE - N
    return offset if offset >= 0 else -2000 + offset


def _loop(consumer, args, render) -> int:
    out = sys.stdout.buffer
    seen = 0
    at_end = set()
    while args.max_messages is None or seen < args.max_messages:
        message = consumer.poll(0.5)
        if message is None:
            out.flush()  # idle: show what we have; while busy, let the buffer batch writes
            continue
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                at_end.add((message.topic(), message.partition()))
                assigned = {(tp.topic, tp.partition) for tp in consumer.assignment()}
                if args.exit_at_end and assigned and assigned <= at_end:
                    break
                continue
            if error.fatal() or not error.retriable():
                raise CliError(error_text(error, args.topic))
            continue
        at_end.discard((message.topic(), message.partition()))
        if render is None:
            out.write(json.dumps(as_json(message)).encode() + b"\n")
        else:
            out.write(render(message))
        seen += 1
    out.flush()
    return 0
