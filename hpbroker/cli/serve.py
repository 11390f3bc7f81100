"""``hpbroker serve``: run the broker (standalone, or a cluster member when zookeeper.connect is set).

Settings come from Kafka's names: a ``server.properties`` file (``--config``),
``--set key=value`` overrides, and the shorthands ``--data-dir`` (``log.dirs``)
and ``--listen`` (``listeners``).  A bad setting or a busy directory is one
readable line and exit status 2 or 1, not a traceback.
"""

import sys

from hpbroker.server import logging_setup
from hpbroker.storage.config import ConfigError


def add_parser(sub) -> None:
    parser = sub.add_parser("serve", help="run the broker (standalone; a cluster member with zookeeper.connect)")
    parser.add_argument("--config", metavar="FILE", help="a Kafka-style server.properties file")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one setting, Kafka's name (repeatable), e.g. --set num.partitions=3")
    parser.add_argument("--data-dir",
                        help="log directory, sets log.dirs (default ./data unless the config file sets it)")
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help="sets the first listener's address: listeners=NAME://HOST:PORT, NAME the configured "
                             "listener's (default PLAINTEXT://127.0.0.1:9092); any others stay as configured")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"],
                        help="text (journald-aware) or one JSON object per line")
    parser.set_defaults(run=run)


def run(args) -> int:
    from hpbroker.acceptor.supervisor import BrokerStartError, Supervisor
    from hpbroker.server.config import BrokerConfig, parse_listeners, parse_overrides, read_properties_file

    logging_setup.setup(args.log_level, args.log_format)

    def load() -> BrokerConfig:
        """The configuration from the command line's sources; SIGHUP calls it again."""
        overrides = parse_overrides(args.set)
        if args.data_dir:
            overrides["log.dirs"] = args.data_dir
        if args.listen:  # the first listener's name (so its security protocol) stays the one configured
            named = overrides.get("listeners") or (read_properties_file(args.config).get("listeners", "")
                                                   if args.config else "")
            listeners = [f"{x.name}://{x.host}:{x.port}" for x in parse_listeners(named, "listeners")] \
                if named else ["PLAINTEXT://"]
            first = listeners[0].partition("://")[0]
            overrides["listeners"] = ",".join([f"{first}://{args.listen}", *listeners[1:]])
        config = BrokerConfig.from_sources(file=args.config, overrides=overrides)
        if "log.dirs" not in config.props and "log.dir" not in config.props:
            config = BrokerConfig.from_sources(file=args.config, overrides={**overrides, "log.dirs": "./data"})
        return config

    try:
        config = load()
        config.validate()
    except ConfigError as exc:
        print(f"hpbroker serve: {exc}", file=sys.stderr)
        return 2
    supervisor = Supervisor(config, load)
    try:
        supervisor.start()
    except BrokerStartError as exc:
        print(f"hpbroker serve: {exc}", file=sys.stderr)
        return 1
    code = supervisor.run()
    if supervisor.boot_failure:
        print(f"hpbroker serve: {supervisor.boot_failure}", file=sys.stderr)
    return code
