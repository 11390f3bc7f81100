"""``hpbroker serve``: run the broker.

The network server is the next issue (the broker server); until it lands this
command checks its arguments and says so, rather than pretending to serve.
"""

import sys


def add_parser(sub) -> None:
    parser = sub.add_parser("serve", help="run the broker (arrives with the broker-server issue)")
    parser.add_argument("--data-dir", default="./data", help="log directory (Kafka's log.dirs), default ./data")
    parser.add_argument("--listen", default="127.0.0.1:9092", metavar="HOST:PORT", help="listener address, default 127.0.0.1:9092")
    parser.set_defaults(run=run)


def run(args) -> int:
    print(
        f"hpbroker serve: the network server is not built yet (see the broker-server issue); "
        f"the storage engine would use {args.data_dir} and listen on {args.listen}",
        file=sys.stderr,
    )
    return 1
