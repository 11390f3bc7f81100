"""``hpbroker consume --zookeeper HOST:PORT[/chroot] --group G TOPIC``: the
console consumer as a member of a ZooKeeper-coordinated group, like the old
kafka-console-consumer with ``--zookeeper``.

The group's range assignment decides which partitions this member reads and
its stored offsets where it starts (``--from-beginning`` only matters when
none are stored).  Offsets are committed as it goes and on exit.
"""

from __future__ import annotations

import json
import logging
import signal
import sys

from hpbroker.cli.connection import CliError
from hpbroker.cli.message_format import as_json
from hpbroker.cluster.consumer_registry import ConsumerIdInUse
from hpbroker.cluster.session import ZooKeeperUnavailable
from hpbroker.zkconsumer import CorruptFetchError, OffsetStorageError, RebalanceFailed, ZookeeperConsumer

AUTO_COMMIT_INTERVAL_MS = 5000  # the console is often stopped by Ctrl-C: keep the stored place recent


def add_arguments(parser) -> None:
    parser.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]",
                        help="join --group as a ZooKeeper-coordinated consumer through this ensemble "
                             "(a cluster-mode broker's zookeeper.connect) instead of a broker-side group")
    parser.add_argument("--offsets-storage", choices=("zookeeper", "kafka"), default="zookeeper",
                        help="with --zookeeper: where the group's offsets live (default zookeeper)")
    parser.add_argument("--dual-commit", action="store_true",
                        help="with --zookeeper: commit to both ZooKeeper and Kafka (to move a group to Kafka)")


def consume(args, render) -> int:
    if not args.group:
        raise CliError("--zookeeper needs --group: a ZooKeeper-coordinated consumer is always a group member")
    if args.partition or args.offset is not None:
        raise CliError("--partition and --offset do not go with --zookeeper: the group's assignment picks the "
                       "partitions and its stored offsets the start")
    # kazoo logs every refused connection attempt; the one line that matters is ours
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)
    try:
        consumer = ZookeeperConsumer(
            args.zookeeper, args.group, [args.topic], offsets_storage=args.offsets_storage,
            dual_commit=args.dual_commit, auto_offset_reset="smallest" if args.from_beginning else "largest",
            auto_commit_interval_ms=AUTO_COMMIT_INTERVAL_MS,
            zookeeper_connection_timeout_ms=int(args.timeout * 1000))
    except (ZooKeeperUnavailable, ConsumerIdInUse, OffsetStorageError, ValueError) as exc:
        raise CliError(str(exc)) from None
    # SIGTERM ends the loop like Ctrl-C, so close() still commits and leaves the group
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if not consumer.registry.partitions(args.topic):
            raise CliError(f"topic {args.topic!r} does not exist")
        return _loop(consumer, args, render)
    except (OffsetStorageError, CorruptFetchError, RebalanceFailed) as exc:
        raise CliError(str(exc)) from None
    finally:
        consumer.close()


def _loop(consumer: ZookeeperConsumer, args, render) -> int:
    out = sys.stdout.buffer
    seen = 0
    while args.max_messages is None or seen < args.max_messages:
        messages = consumer.poll(0.5, None if args.max_messages is None else args.max_messages - seen)
        if not messages:
            out.flush()
            if args.exit_at_end and consumer.at_end():
                break
            continue
        for message in messages:
            record = _ClientStyle(message)
            out.write(json.dumps(as_json(record)).encode() + b"\n" if render is None else render(record))
            seen += 1
    out.flush()
    return 0


class _ClientStyle:
    """A zkconsumer Message seen through confluent-kafka's accessor methods,
    so the console's --format and --json render both kinds of consumer."""

    __slots__ = ("_m",)

    def __init__(self, message):
        self._m = message

    def topic(self):
        return self._m.topic

    def partition(self):
        return self._m.partition

    def offset(self):
        return self._m.offset

    def key(self):
        return self._m.key

    def value(self):
        return self._m.value

    def headers(self):
        return list(self._m.headers) or None

    def timestamp(self):
        return 1, self._m.timestamp  # 1: the producer's create time
