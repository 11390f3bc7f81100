"""What it costs here to wake a process on another CPU, to read the per-request
figures of requests that cross workers by.

A produce request for a partition another worker owns is a round trip on the
peer channel: the worker holding the connection writes the call and goes on
(or sleeps), the owner wakes, appends and answers, and the first worker wakes
again.  On bare metal a wake-up of an idle CPU costs a few microseconds.  In a
virtual machine whose idle vCPUs halt into the hypervisor (halt polling off in
the guest, as on the machines these figures come from: kernel command line
``haltpoll.guest_halt_poll_ns=0``), each such wake-up is an exit to the host
and an interrupt to the other vCPU, and the CPU time it costs both processes
can be several times that of the work the call does.

    .venv/bin/python bench/wakeup_probe.py [ROUND_TRIPS]

passes one byte back and forth between two processes over a Unix socket pair,
blocking on each receive, with both pinned to one CPU (a wake-up is a switch
on that CPU) and then to two (a wake-up crosses to the other CPU, which was
idle: where two workers' round trip lands when they are not busy).  It prints
CPU time (both processes, user and system) and wall time per round trip.
The benchmarks record the same line beside the machine, taken before they start.
"""

from __future__ import annotations

import os
import resource
import socket
import struct
import sys
import time

_USAGE = struct.Struct("<dd")


def _cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def _ping_pong(cpus: tuple[int, int], round_trips: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per round trip between two processes pinned to ``cpus``."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = os.fork()
    if child == 0:  # the echo side: its CPU time goes back over the socket at the end
        try:
            mine.close()
            os.sched_setaffinity(0, {cpus[1]})
            theirs.sendall(b"r")
            started = _cpu()
            for _ in range(round_trips):
                theirs.recv(1)
                theirs.sendall(b"x")
            ended = _cpu()
            theirs.sendall(_USAGE.pack(ended[0] - started[0], ended[1] - started[1]))
        finally:
            os._exit(0)
    theirs.close()
    try:
        os.sched_setaffinity(0, {cpus[0]})
        mine.recv(1)  # the echo side is pinned and ready
        started, wall = _cpu(), time.perf_counter()
        for _ in range(round_trips):
            mine.sendall(b"x")
            mine.recv(1)
        wall = time.perf_counter() - wall
        ended = _cpu()
        echo = b""
        while len(echo) < _USAGE.size:
            piece = mine.recv(_USAGE.size - len(echo))
            if not piece:
                raise RuntimeError("the echo process ended without its figures")
            echo += piece
        echo_user, echo_sys = _USAGE.unpack(echo)
    finally:
        mine.close()
        os.waitpid(child, 0)
    cpu = (ended[0] - started[0]) + (ended[1] - started[1]) + echo_user + echo_sys
    return cpu / round_trips * 1e6, wall / round_trips * 1e6


def wake_costs(round_trips: int = 20000) -> dict[str, tuple[float, float]]:
    """``{"one CPU": (cpu µs, wall µs), "two CPUs": ...}`` per round trip; the
    second only where this process may use two CPUs.  Its own affinity is
    restored afterwards."""
    allowed = sorted(os.sched_getaffinity(0))
    costs = {}
    try:
        costs["one CPU"] = _ping_pong((allowed[0], allowed[0]), round_trips)
        if len(allowed) > 1:
            costs["two CPUs"] = _ping_pong((allowed[0], allowed[1]), round_trips)
    finally:
        os.sched_setaffinity(0, set(allowed))
    return costs


def describe(round_trips: int = 20000) -> str:
    """One line for a benchmark's machine block."""
    parts = [f"{where} {cpu:.1f} CPU µs ({wall:.1f} µs wall)" for where, (cpu, wall) in wake_costs(round_trips).items()]
    return "a round trip between two processes, " + ", ".join(parts)


def main() -> int:
    round_trips = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
    print(f"wake-ups: {describe(round_trips)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
