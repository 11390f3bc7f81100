"""What every client sub-command shares: the connection flags, client
configuration, a reachability probe, and turning failures into one line.

The commands speak only the Kafka protocol (through confluent-kafka), so they
work against any Kafka broker, not only hpbroker.
"""

import argparse
import logging
import os
import socket
import sys
from concurrent.futures import TimeoutError as FutureTimeout

from confluent_kafka import KafkaError, KafkaException

from hpbroker.server.config import read_properties_file
from hpbroker.storage.config import ConfigError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 10.0


class CliError(Exception):
    """A failure the user can act on: printed as one line, exit status 1."""


def add_connection_args(parser, json_flag: bool = True, json_help: str = "print JSON for scripts instead of a table"):
    parser.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, metavar="HOST:PORT",
                        help=f"broker(s) to connect to, comma separated (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"give up on the broker after this long (default {DEFAULT_TIMEOUT_S:g})")
    parser.add_argument("--command-config", action="append", default=[], metavar="KEY=VALUE|FILE",
                        help="extra librdkafka client setting, e.g. security.protocol=SASL_SSL or "
                             "ssl.ca.location=ca.pem, or a "
                             "properties file of them, as Kafka's tools take (keeps a password off the command "
                             "line; repeatable)")
    if json_flag:
        parser.add_argument("--json", action="store_true", help=json_help)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"want a number of seconds above 0, got {text!r}")
    return value


def _silent_logger() -> logging.Logger:
    # librdkafka otherwise prints a FAIL line to stderr on every reconnect attempt
    logger = logging.getLogger("hpbroker.cli.librdkafka")
    logger.propagate = False
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    return logger


def client_config(args, **extra) -> dict:
    timeout_ms = int(args.timeout * 1000)
    config = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "hpbroker-cli",
        "socket.timeout.ms": max(timeout_ms, 10),
        "socket.connection.setup.timeout.ms": max(timeout_ms, 1000),
        "logger": _silent_logger(),
    }
    config.update(command_config(args))
    config.update(extra)
    return config


def command_config(args) -> dict[str, str]:
    """``--command-config``'s settings: each KEY=VALUE, and each properties file's."""
    settings: dict[str, str] = {}
    for item in args.command_config:
        if "=" not in item and os.path.isfile(item):
            try:
                settings.update(read_properties_file(item))
            except ConfigError as exc:
                raise CliError(str(exc)) from None
        else:
            settings.update(parse_pairs([item], "--command-config"))
    return settings


def parse_pairs(items, flag: str) -> dict:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a missing ``=`` is a CliError."""
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"{flag} wants KEY=VALUE, got {item!r}")
        pairs[key.strip()] = value
    return pairs


def probe(args) -> None:
    """Fail fast, with the OS's reason, when no bootstrap server takes a TCP
    connection: librdkafka would retry silently until the timeout."""
    reasons = []
    for server in args.bootstrap_server.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.split("://")[-1].strip("[]")
        try:
            with socket.create_connection((host, int(port)), timeout=min(args.timeout, 5.0)):
                return
        except ValueError:
            raise CliError(f"bad --bootstrap-server {server!r}: want HOST:PORT") from None
        except OSError as exc:
            reasons.append((exc.strerror or str(exc) or type(exc).__name__).lower())
    raise CliError(f"cannot reach {args.bootstrap_server} ({'; '.join(dict.fromkeys(reasons))})")


def connect(args):
    """An AdminClient to a broker that has answered a Metadata request, so that
    "down" and "not speaking Kafka" are told apart from later failures."""
    from confluent_kafka.admin import AdminClient

    probe(args)
    refusals: list[KafkaError] = []  # a failed SASL login reaches only the error callback

    def on_error(error: KafkaError) -> None:
        if error.code() == KafkaError._AUTHENTICATION:
            refusals.append(error)
    admin = AdminClient(client_config(args, error_cb=on_error))
    try:
        admin.list_topics(timeout=args.timeout)
    except KafkaException as exc:
        admin.poll(0)  # serves the error callback
        if refusals:
            raise CliError(f"{args.bootstrap_server} refused the login: {refusals[-1].str()}") from None
        raise CliError(f"cannot reach {args.bootstrap_server} (no Kafka answer within {args.timeout:g} s: "
                       f"{exc.args[0].str()})") from None
    return admin


def error_text(error: KafkaError, what: str = "") -> str:
    """A KafkaError as a sentence; ``what`` names the object it is about."""
    code = error.code()
    subject = f"{what}: " if what else ""
    if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
        return f"{subject}no such topic or partition"
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return f"{subject}topic already exists"
    if code in (KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT):
        return f"{subject}timed out waiting for the broker"
    if code == KafkaError._TRANSPORT:
        return f"{subject}lost the connection to the broker ({error.str()})"
    return f"{subject}{error.str()}"


def result(future, timeout: float, what: str = ""):
    """A future's result, with its KafkaError turned into a CliError."""
    try:
        return future.result(timeout=timeout + 1.0)
    except KafkaException as exc:
        raise CliError(error_text(exc.args[0], what)) from None
    except FutureTimeout:
        raise CliError(f"{what + ': ' if what else ''}no answer from the broker within {timeout:g} s") from None


def guarded(prefix: str, action, args) -> int:
    """Run ``action(args)``; any failure becomes one line on stderr and exit status 1."""
    try:
        return action(args) or 0
    except CliError as exc:
        print(f"{prefix}: {exc}", file=sys.stderr)
    except KafkaException as exc:
        print(f"{prefix}: {error_text(exc.args[0])}", file=sys.stderr)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader (head, less) went away: not an error of ours; point stdout
        # at /dev/null so the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 1
