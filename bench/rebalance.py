"""What a member joining or leaving a consumer group costs the group's reading,
under each way librdkafka can coordinate it, against one broker in one run:

* ``classic-eager``: the classic protocol with the range assignor; every
  member gives up everything at each rebalance.
* ``classic-cooperative``: the classic protocol with cooperative-sticky
  (KIP-429); only moved partitions are given up, in two rebalances.
* ``consumer``: the consumer protocol (KIP-848, ``group.protocol=consumer``);
  the broker assigns, each moved partition is handed over on its own.

    .venv/bin/python bench/rebalance.py [--partitions 12] [--members 4] [--rounds 2]

Members join one at a time until there are ``--members``, then leave one at
a time (a clean close) until one is left.  All members are polled in turn
from one thread, 20 ms a turn, and after every turn the assignments are
sampled: a partition that no member holds is *paused*.  Per step the table
gives the time until the group is balanced again (every partition held,
sizes within one of each other) and the partition-seconds paused meanwhile;
the totals sum the steps.  The broker runs with Kafka's defaults for groups
(initial rebalance delay 3 s; consumer protocol: heartbeat interval 5 s,
which librdkafka shortens while an assignment is in flux); the classic
members use librdkafka's defaults (session 45 s, heartbeat 3 s).  These are
times set by the protocols' timers and round trips, not by CPU, so one run
on a shared machine tells.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import confluent_kafka as ck  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from harness.broker import Broker  # noqa: E402

PROTOCOLS = {
    "classic-eager": {"partition.assignment.strategy": "range"},
    "classic-cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}
TURN_S = 0.02
STEP_TIMEOUT_S = 60.0


def held(consumers) -> list[set[int]]:
    return [{tp.partition for tp in c.assignment()} for c in consumers]


def balanced(sets: list[set[int]], partitions: int) -> bool:
    return (sum(map(len, sets)) == partitions and set().union(*sets) == set(range(partitions))
            and max(map(len, sets)) - min(map(len, sets)) <= 1)


def settle(consumers, partitions: int) -> tuple[float, float]:
    """Poll every member in turn until the group is balanced: (seconds taken,
    partition-seconds paused meanwhile)."""
    started = last = time.monotonic()
    paused = 0.0
    while True:
        for c in consumers:
            c.consume(100, TURN_S)
        now = time.monotonic()
        sets = held(consumers)
        paused += (partitions - len(set().union(*sets))) * (now - last)
        last = now
        if balanced(sets, partitions):
            return now - started, paused
        if now - started > STEP_TIMEOUT_S:
            raise TimeoutError(f"the group did not balance within {STEP_TIMEOUT_S:.0f} s: {sets}")


def run_protocol(bootstrap: str, name: str, topic: str, partitions: int, members: int) -> list[tuple]:
    settings = {"bootstrap.servers": bootstrap, "group.id": f"{topic}-{name}", "auto.offset.reset": "earliest",
                **PROTOCOLS[name]}
    consumers: list[ck.Consumer] = []
    steps = []
    try:
        for n in range(1, members + 1):
            c = ck.Consumer(settings)
            c.subscribe([topic])
            consumers.append(c)
            steps.append((f"join {n}",) + settle(consumers, partitions))
        while len(consumers) > 1:
            consumers.pop().close()
            steps.append((f"leave to {len(consumers)}",) + settle(consumers, partitions))
    finally:
        for c in consumers:
            c.close()
    return steps


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hpbroker-rebalance-") as tmp:
        broker = Broker(Path(tmp) / "data").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            rows = []
            for r in range(args.rounds):
                for name in PROTOCOLS:
                    topic = f"rebalance-{r}-{name}"
                    admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
                    steps = run_protocol(broker.bootstrap, name, topic, args.partitions, args.members)
                    rows.append((r + 1, name, steps))
                    print(f"round {r + 1} {name}: " + ", ".join(f"{s} {t:.2f} s/{p:.1f}" for s, t, p in steps),
                          flush=True)
        finally:
            broker.stop()
    print()
    print("| round | protocol | time to balance, all steps (s) | partition-seconds paused | worst step (s) |")
    print("| --- | --- | --- | --- | --- |")
    for r, name, steps in rows:
        print(f"| {r} | {name} | {sum(t for _, t, _ in steps):.1f} | {sum(p for _, _, p in steps):.1f} | "
              f"{max(t for _, t, _ in steps):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
