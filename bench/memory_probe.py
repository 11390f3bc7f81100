"""What a page of fresh memory costs here, to read the per-byte figures by,
and how to give every phase of a comparison the same.

Every byte a broker stores lands in a page-cache page the kernel takes off its
free list (a broker keeping records in memory takes heap pages the same way).
On bare metal that page costs a copy.  In a virtual machine whose balloon
device reports free pages to the host (virtio-balloon's
VIRTIO_BALLOON_F_REPORTING), the host takes back what the guest leaves free,
and the guest's next touch of it faults into the host: the copy into the page
cache then costs several times more, whoever writes.  On the machines these
figures come from that first touch cost about 2.5 CPU s/GiB, ten times the
copy.  Pages the guest freed stayed backed for about a minute when this was
first measured (a broker ingesting a GiB into them paid the same 20 s after
they were freed, a tenth more after 60 s, a third more after 120 s); on other
days 20 s was already cold.  So what a phase pays depends on what ran before
it: a phase after one that deleted its files is warm, one after phases that
kept theirs is cold.

    .venv/bin/python bench/memory_probe.py [DIR]

writes 256 MiB into a new file (in DIR, default the temp dir), deletes it and
writes it again at once, into the pages just freed: the first figure is what
the free list costs now, the second what a warm page costs.  The benchmarks
record the same line beside the machine, taken before they start, and call
``warm`` before each phase that stores many bytes, so that no phase pays the
host's faults for its place in the order.

The reporting is work too, and it runs on this machine's cores: the guest
reports what it freed about two seconds later (the kernel's page reporting
delay), and the host's handling of the report shows in the guest as steal
time.  After a warm-up of a few GiB that was a tenth to a third of both
cores for a few hundred milliseconds, in whatever phase ran then
(bench/cluster_e2e.py's phase after next, when the phase and the warm-up
between were short: its figure fell by a third).  So ``warm`` first waits
out the report of the previous warm-up's pages (``REPORTED_AFTER_S`` since
it freed them; nothing in the guest shows when the host is done), and a
phase that starts at once after its own warm-up and lasts under two seconds
pays none of it.
"""

from __future__ import annotations

import glob
import os
import resource
import shutil
import sys
import tempfile
import time

# the balloon's feature bit that returns free guest pages to the host
_REPORTING_BIT = 5
# seconds from a free until the host has handled the guest's report of it: the
# guest's page reporting delay (2 s) and the host's work on a few GiB
REPORTED_AFTER_S = 3.0
_last_freed: float | None = None  # time.monotonic() when warm() last freed its pages


def free_page_reporting() -> bool | None:
    """Whether a virtio balloon here reports free pages to the host; None without one."""
    found = None
    for path in glob.glob("/sys/bus/virtio/drivers/virtio_balloon/virtio*/features"):
        try:
            with open(path) as f:
                bits = f.read().strip()
        except OSError:
            continue
        found = bool(found) or (len(bits) > _REPORTING_BIT and bits[_REPORTING_BIT] == "1")
    return found


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _write_file(path: str, mib: int) -> float:
    """CPU s/GiB to write ``mib`` MiB into a new file's page cache, 1 MiB a write."""
    chunk = bytes(1 << 20)
    started = _cpu()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range(mib):
            os.write(fd, chunk)
    finally:
        os.close(fd)
    return (_cpu() - started) * 1024 / mib


def write_cost(directory: str | None = None, mib: int = 256) -> tuple[float, float]:
    """CPU s/GiB of writing into the page cache from the free list as it is now,
    then again into the pages that deleting the first file just freed (the
    host has not taken those back yet)."""
    _settle()
    return _write_and_free(directory, mib), _write_and_free(directory, mib)


def _settle() -> None:
    """Wait until the host has handled the report of the pages the last warm-up freed."""
    if _last_freed is not None and free_page_reporting():
        time.sleep(max(0.0, _last_freed + REPORTED_AFTER_S - time.monotonic()))


def _write_and_free(directory: str | None, mib: int) -> float:
    global _last_freed
    with tempfile.TemporaryDirectory(prefix="memory-warm-", dir=directory) as scratch:
        mib = max(1, min(mib, shutil.disk_usage(scratch).free // 2**20 // 2))
        path = os.path.join(scratch, "warm")
        cost = _write_file(path, mib)
        os.unlink(path)
    _last_freed = time.monotonic()
    return cost


def warm(directory: str | None = None, mib: int = 1024) -> float:
    """Write ``mib`` MiB into a new file and delete it, so that the pages the
    next phase takes first (page cache or heap, whoever touches them) are ones
    the host backs: pages freed here stay warm for a while (seconds to about
    a minute, as the host decides) before the balloon returns them. Each
    phase of a comparison warmed this way starts from the same state, as it
    would on bare metal, instead of the order of the phases deciding who pays
    the host's faults. CPU s/GiB of that write; at most half the file
    system's free space is written (the warming is smaller then, never a
    full disk).  It starts once the host has handled the report of the
    previous warm-up's pages (module docstring)."""
    _settle()
    return _write_and_free(directory, mib)


def describe(directory: str | None = None, mib: int = 256) -> str:
    """One line for a benchmark's machine block."""
    fresh, again = write_cost(directory, mib)
    reporting = free_page_reporting()
    balloon = ("no balloon device" if reporting is None
               else f"free page reporting {'on' if reporting else 'off'}")
    return f"{mib} MiB into the page cache {fresh:.2f} CPU s/GiB, into pages just freed {again:.2f} ({balloon})"


def main() -> int:
    print(f"page cache: {describe(sys.argv[1] if len(sys.argv) > 1 else None)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
