"""The ``hpbroker`` command: sub-commands registered from small modules."""

import argparse
import sys

from hpbroker.cli import (
    acls,
    cluster,
    consume,
    dump_log,
    groups,
    offsets,
    produce,
    serve,
    spark_load,
    topics,
    transactions,
    users,
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hpbroker", description="hpbroker: a Kafka-compatible log broker.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in (serve, cluster, dump_log, topics, groups, transactions, produce, consume, offsets, users,
                   acls, spark_load):
        module.add_parser(sub)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
