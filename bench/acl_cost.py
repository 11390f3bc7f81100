"""What the ACL authorizer costs a request: two brokers alike but for
``authorizer.class.name``, measured in turns in one run.

    .venv/bin/python bench/acl_cost.py [--acls N] [--rounds R] [--seconds S] [--markdown FILE]

Both brokers (two workers each) have a PLAINTEXT listener and one topic of
two partitions. The one with the authorizer also holds N ACLs: one letting
User:ANONYMOUS (a PLAINTEXT client) DESCRIBE the topic, the others on other
topics, prefixes and principals, so each decision looks through a populated
index. The load, from one Python thread, is a closed loop of one request
outstanding on each of 10 connections, the same pre-encoded request again
and again: ListOffsets for one partition (one DESCRIBE check a request) and
Metadata for one topic (one DESCRIBE check, and the listing's work).
Broker CPU is utime+stime of the acceptor and workers, read at each
window's edges; rounds alternate between the brokers.
"""

import argparse
import statistics
import struct
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from bench.wire_load import closed_loop, list_offsets_request  # noqa: E402
from harness.broker import Broker  # noqa: E402

TOPIC = "acl-cost"
CONNECTIONS = 10


def metadata_request(topic: str) -> bytes:
    """Metadata v1 for one topic, framed (header v1: client id)."""
    name, client = topic.encode(), b"acl-cost"
    header = struct.pack(">hhih", 3, 1, 1, len(client)) + client
    body = struct.pack(">i", 1) + struct.pack(">h", len(name)) + name
    return struct.pack(">i", len(header) + len(body)) + header + body


def fill(broker: Broker, acls: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
    bindings = [AclBinding(ResourceType.TOPIC, TOPIC, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)]
    for i in range(acls - 1):
        kind = ResourceType.GROUP if i % 4 == 3 else ResourceType.TOPIC
        pattern = ResourcePatternType.PREFIXED if i % 3 == 0 else ResourcePatternType.LITERAL
        bindings.append(AclBinding(kind, f"other-{i}", pattern, f"User:user-{i % 50}", "*", AclOperation.READ,
                                   AclPermissionType.ALLOW))
    for start in range(0, len(bindings), 500):
        for future in admin.create_acls(bindings[start:start + 500]).values():
            future.result(60)


def window(broker: Broker, request: bytes, seconds: float) -> float:
    """Broker CPU µs per request over one window of the closed loop."""
    marks: list[float] = []
    answered, _first = closed_loop(broker.host, broker.port, request, CONNECTIONS, seconds, 1.0,
                                   lambda: marks.append(broker.cpu_seconds()))
    return (marks[1] - marks[0]) / answered * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--acls", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--markdown", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        plain = Broker(Path(directory) / "open", overrides={"num.workers": "2"}).start()
        guarded = Broker(Path(directory) / "acl", overrides={
            "num.workers": "2", "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:ANONYMOUS"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": plain.bootstrap})
            admin.create_topics([NewTopic(TOPIC, 2)])[TOPIC].result(30)
            fill(guarded, args.acls)
            # the topic's creator was a super user; from here on ANONYMOUS is an ordinary principal
            guarded.stop()
            guarded.overrides["super.users"] = ""
            guarded.start()
            rows = {}
            for name, request in (("ListOffsets", list_offsets_request(TOPIC, 0)),
                                  ("Metadata, one topic", metadata_request(TOPIC))):
                figures: dict[str, list[float]] = {"none": [], "acl": []}
                for _ in range(args.rounds):
                    figures["none"].append(window(plain, request, args.seconds))
                    figures["acl"].append(window(guarded, request, args.seconds))
                rows[name] = figures
        finally:
            plain.stop()
            guarded.stop()
    lines = [f"| request (µs of broker CPU a request, {CONNECTIONS} connections) | no authorizer | "
             f"authorizer, {args.acls} ACLs | ratio |", "| --- | --- | --- | --- |"]
    for name, figures in rows.items():
        none, acl = statistics.median(figures["none"]), statistics.median(figures["acl"])
        lines.append(f"| {name} | {none:.1f} ({', '.join(f'{x:.0f}' for x in figures['none'])}) | "
                     f"{acl:.1f} ({', '.join(f'{x:.0f}' for x in figures['acl'])}) | {acl / none:.2f} |")
    report = "\n".join(lines)
    print(report)
    if args.markdown:
        args.markdown.write_text(report + "\n")


if __name__ == "__main__":
    main()
