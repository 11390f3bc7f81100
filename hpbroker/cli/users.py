"""``hpbroker users list|set-password|delete``: the SCRAM credentials a SASL
listener checks logins against, through DescribeUserScramCredentials and
AlterUserScramCredentials (what ``kafka-configs --entity-type users`` does).
The password is salted here and never sent; it is read from the terminal
(asked twice) or, when stdin is not one, from its first line."""

import getpass
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

from hpbroker.cli import output
from hpbroker.cli.connection import CliError, add_connection_args, connect, error_text, guarded
from hpbroker.security import scram

PREFIX = "hpbroker users"
MECHANISMS = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
DEFAULT_ITERATIONS = 8192  # what kafka-configs uses when none is given is 4096; a little more costs logins little


def add_parser(sub) -> None:
    parser = sub.add_parser("users", help="list, set and delete the SCRAM credentials of SASL users")
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True

    p = actions.add_parser("list", help="users with SCRAM credentials, their mechanisms and iterations")
    add_connection_args(p)
    p.set_defaults(run=run, action_fn=list_users)

    p = actions.add_parser("set-password", help="add a user's SCRAM credential, or replace it")
    p.add_argument("user", metavar="USER")
    _mechanism_arg(p)
    p.add_argument("--iterations", type=int, default=DEFAULT_ITERATIONS, metavar="N",
                   help=f"PBKDF2 iterations, {scram.MIN_ITERATIONS}-{scram.MAX_ITERATIONS} "
                        f"(default {DEFAULT_ITERATIONS})")
    add_connection_args(p, json_flag=False)
    p.set_defaults(run=run, action_fn=set_password)

    p = actions.add_parser("delete", help="delete a user's SCRAM credential (it can no longer log in with it)")
    p.add_argument("user", metavar="USER")
    _mechanism_arg(p)
    add_connection_args(p, json_flag=False)
    p.set_defaults(run=run, action_fn=delete_user)


def _mechanism_arg(parser) -> None:
    parser.add_argument("--mechanism", type=str.upper, choices=sorted(MECHANISMS), action="append",
                        help="SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable; default both)")


def run(args) -> int:
    def with_admin(args):
        return args.action_fn(args, connect(args))
    return guarded(PREFIX, with_admin, args)


def _name(mechanism) -> str:
    return mechanism.name.replace("_", "-")


def list_users(args, admin) -> int:
    try:
        described = admin.describe_user_scram_credentials(request_timeout=args.timeout).result(
            timeout=args.timeout + 1)
    except KafkaException as exc:
        raise CliError(error_text(exc.args[0])) from None
    rows = [{"user": user, "mechanism": _name(info.mechanism), "iterations": info.iterations}
            for user, description in sorted(described.items())
            for info in description.scram_credential_infos]
    if args.json:
        output.emit_json(rows)
    else:
        output.table(["USER", "MECHANISM", "ITERATIONS"], [[r["user"], r["mechanism"], r["iterations"]] for r in rows])
    return 0


def _password() -> str:
    if not sys.stdin.isatty():
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise CliError("the two passwords differ")
    if not password:
        raise CliError("the password is empty")
    return password


def _altered(admin, changes, args, user: str, what: str) -> int:
    try:
        for future in admin.alter_user_scram_credentials(changes, request_timeout=args.timeout).values():
            future.result(timeout=args.timeout + 1)
    except KafkaException as exc:
        raise CliError(f"{user}: {error_text(exc.args[0])}") from None
    output.line(f"{what} for {user}")
    return 0


def set_password(args, admin) -> int:
    if not scram.MIN_ITERATIONS <= args.iterations <= scram.MAX_ITERATIONS:
        raise CliError(f"--iterations {args.iterations}: Kafka's bounds are {scram.MIN_ITERATIONS}-"
                       f"{scram.MAX_ITERATIONS}")
    password = _password().encode()
    mechanisms = args.mechanism or sorted(MECHANISMS)
    changes = [UserScramCredentialUpsertion(args.user, ScramCredentialInfo(MECHANISMS[m], args.iterations), password)
               for m in dict.fromkeys(mechanisms)]
    return _altered(admin, changes, args, args.user, f"set {', '.join(dict.fromkeys(mechanisms))}")


def delete_user(args, admin) -> int:
    mechanisms = args.mechanism
    if not mechanisms:  # those it has
        try:
            described = admin.describe_user_scram_credentials([args.user], request_timeout=args.timeout)
            infos = described[args.user].result(timeout=args.timeout + 1).scram_credential_infos
        except KafkaException as exc:
            raise CliError(f"{args.user}: {error_text(exc.args[0])}") from None
        mechanisms = [_name(info.mechanism) for info in infos]
    changes = [UserScramCredentialDeletion(args.user, MECHANISMS[m]) for m in dict.fromkeys(mechanisms)]
    return _altered(admin, changes, args, args.user, f"deleted {', '.join(dict.fromkeys(mechanisms))}")
