"""``hpbroker produce TOPIC``: the console producer, one record per stdin line.

A line is ``[HEADERS<TAB>][KEY<SEP>]VALUE`` when ``--headers`` / ``--key-separator``
are given, as kafka-console-producer's parse.headers / parse.key read it;
headers are ``k1:v1,k2:v2``.  Every delivery is waited for: the exit status is 1
if any record was not acknowledged.
"""

import os
import stat
import sys

from confluent_kafka import KafkaException, Producer

from hpbroker.cli import output
from hpbroker.cli.connection import CliError, add_connection_args, client_config, connect, error_text, guarded

PREFIX = "hpbroker produce"
PROGRESS_MIN_BYTES = 4 << 20  # a bar for smaller inputs would only flicker


def add_parser(sub) -> None:
    parser = sub.add_parser("produce", help="console producer: one record per line of stdin")
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--key-separator", metavar="SEP", help="split each line into KEY SEP VALUE at the first SEP")
    parser.add_argument("--headers", action="store_true",
                        help="each line starts with headers k1:v1,k2:v2 and --headers-delimiter")
    parser.add_argument("--headers-delimiter", default="\t", metavar="SEP", help="ends the headers (default: tab)")
    parser.add_argument("--header", action="append", default=[], metavar="KEY=VALUE",
                        help="a header on every record (repeatable)")
    parser.add_argument("--partition", type=int, metavar="N", help="write to this partition (default: by key)")
    parser.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    parser.add_argument("--acks", default="all", choices=["0", "1", "all", "-1"])
    parser.add_argument("--linger-ms", type=int, default=5, metavar="MS", help="batching delay (default 5)")
    add_connection_args(parser, json_flag=False)
    parser.set_defaults(run=lambda args: guarded(PREFIX, produce_lines, args))


def produce_lines(args) -> int:
    static_headers = [(k, v.encode()) for k, v in _pairs(args.header)]
    connect(args)
    producer = Producer(client_config(args, **{
        "acks": args.acks, "compression.type": args.compression, "linger.ms": args.linger_ms,
        "message.timeout.ms": max(int(args.timeout * 1000), 1000),
        "enable.idempotence": args.acks in ("all", "-1"),
    }))
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)

    stdin = sys.stdin.buffer
    bar = _progress_for(stdin)
    sent = 0
    with bar or output.Nothing():
        for raw in stdin:
            line = raw.rstrip(b"\n").rstrip(b"\r")
            headers, key, value = _split(line, args)
            kwargs = {"partition": args.partition} if args.partition is not None else {}
            _produce(producer, args.topic, value, key, static_headers + headers, delivered, kwargs)
            sent += 1
            if bar is not None:
                bar.advance(bar.task_ids[0], len(raw))
        remaining = producer.flush(args.timeout)
    if remaining:
        raise CliError(f"{remaining} of {sent} records were not acknowledged within {args.timeout:g} s")
    if failures:
        raise CliError(f"{len(failures)} of {sent} records failed: {error_text(failures[0], args.topic)}")
    return 0


def _produce(producer, topic, value, key, headers, callback, kwargs) -> None:
    while True:
        try:
            producer.produce(topic, value=value, key=key, headers=headers or None, on_delivery=callback, **kwargs)
            producer.poll(0)
            return
        except BufferError:
            # the local queue is full: wait for deliveries to make room
            producer.poll(0.1)
        except KafkaException as exc:
            raise CliError(error_text(exc.args[0], topic)) from None


def _split(line: bytes, args):
    headers = []
    if args.headers:
        head, sep, line = line.partition(args.headers_delimiter.encode())
        if not sep:
            raise CliError(f"line without the headers delimiter {args.headers_delimiter!r}: {line[:60]!r}")
        for pair in filter(None, head.split(b",")):
            k, _, v = pair.partition(b":")
            headers.append((k.decode(errors="replace"), v))
    key = None
    if args.key_separator:
        k, sep, rest = line.partition(args.key_separator.encode())
        if sep:
            key, line = k, rest
    return headers, key, line


def _pairs(items):
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--header wants KEY=VALUE, got {item!r}")
        yield key, value


def _progress_for(stream):
    """A bar when stdin is a large regular file (redirected with <), else None."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError):
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size < PROGRESS_MIN_BYTES:
        return None
    return output.byte_progress(info.st_size - stream.tell(), "producing")
