"""A fleet of rdkafka_performance processes (one connection each) and what they sent.

Every process runs with librdkafka's statistics every ``stats_ms``, written
line by line to its own file (``stdbuf -oL``). Each JSON line carries a
CLOCK_MONOTONIC timestamp (``ts``, µs: the clock of Python's time.monotonic())
and cumulative counters: requests sent per API per broker (``req``) and
messages sent (``txmsgs``). ``counted(api, t0, t1)`` interpolates each
process's counters at two instants, so a phase's window is counted
exactly where the broker's CPU was read, whatever the stats cadence.
"""

import json
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.waiting import wait_for


@dataclass
class Sample:
    ts: float  # seconds, CLOCK_MONOTONIC
    requests: dict[str, int]  # api -> requests sent, every broker summed
    txmsgs: int


def parse_stats(path: Path) -> list[Sample]:
    samples = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            stats = json.loads(line)
        except ValueError:  # a line cut short by the kill
            continue
        requests: dict[str, int] = {}
        for broker in stats.get("brokers", {}).values():
            for api, n in broker.get("req", {}).items():
                requests[api] = requests.get(api, 0) + n
        samples.append(Sample(stats["ts"] / 1e6, requests, stats.get("txmsgs", 0)))
    return samples


def _at(samples: list[Sample], t: float, value) -> float:
    """A cumulative counter linearly interpolated at ``t`` (clamped to the samples' span)."""
    if t <= samples[0].ts:
        return value(samples[0])
    for a, b in zip(samples, samples[1:]):
        if a.ts <= t <= b.ts:
            share = (t - a.ts) / (b.ts - a.ts) if b.ts > a.ts else 1.0
            return value(a) + share * (value(b) - value(a))
    return value(samples[-1])


class Fleet:
    """``rdkafka_performance`` processes, one per argument list."""

    def __init__(self, binary: Path, workdir: Path, argvs: list[list[str]], stats_ms: int | None = 500):
        self.binary, self.workdir, self.argvs, self.stats_ms = binary, workdir, argvs, stats_ms
        self.procs: list[subprocess.Popen] = []
        self.outs = [workdir / f"client-{i}.out" for i in range(len(argvs))]

    def start(self) -> "Fleet":
        self.workdir.mkdir(parents=True, exist_ok=True)
        for argv, out in zip(self.argvs, self.outs):
            with open(out, "wb") as f, open(out.with_suffix(".err"), "wb") as err:
                cmd = [str(self.binary), *argv]
                if self.stats_ms is not None:  # line-buffered, so a line is in the file once printed
                    cmd = ["stdbuf", "-oL", *cmd, "-T", str(self.stats_ms)]
                self.procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=err))
        return self

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def wait_sending(self, api: str, timeout: float = 60.0) -> None:
        """Until every process has reported at least one ``api`` request sent."""
        pattern = re.compile(rf'"{api}":\s*([1-9])')

        def all_sending() -> bool:
            for proc, out in zip(self.procs, self.outs):
                if proc.poll() is not None:
                    raise RuntimeError(f"rdkafka_performance exited with {proc.returncode}: "
                                       f"{out.with_suffix('.err').read_text(errors='replace')[-2000:]}")
                if not pattern.search(out.read_text(errors="replace")[-200_000:]):
                    return False
            return True

        wait_for(all_sending, timeout, f"{len(self.procs)} rdkafka_performance processes to send {api}",
                 interval=0.1)

    def settle(self) -> None:
        """Give every process time for one more stats line (after a window's end)."""
        time.sleep((self.stats_ms or 0) / 1000 + 0.2)

    def wait(self, timeout: float) -> list[int]:
        """Exit codes, once every process has ended by itself (``timeout`` for the whole fleet)."""
        deadline = time.monotonic() + timeout
        return [p.wait(max(0.1, deadline - time.monotonic())) for p in self.procs]

    def stop(self) -> None:
        """SIGINT (the program's own stop), a second one (exit at once), then SIGKILL."""
        for sig, grace in ((signal.SIGINT, 5.0), (signal.SIGINT, 3.0), (signal.SIGKILL, 5.0)):
            for p in self.procs:
                if p.poll() is None:
                    p.send_signal(sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
                time.sleep(0.05)

    def counted(self, api: str, t0: float, t1: float) -> tuple[float, float]:
        """(``api`` requests, messages sent) by the whole fleet between t0 and t1 (monotonic seconds)."""
        requests = messages = 0.0
        for out in self.outs:
            samples = parse_stats(out)
            if not samples:
                raise RuntimeError(f"no statistics in {out}")
            req = lambda s: s.requests.get(api, 0)  # noqa: E731
            msgs = lambda s: s.txmsgs  # noqa: E731
            requests += _at(samples, t1, req) - _at(samples, t0, req)
            messages += _at(samples, t1, msgs) - _at(samples, t0, msgs)
        return requests, messages
