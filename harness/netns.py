"""Running the calling thread in a network namespace (``setns(2)``), for a
broker or ZooKeeper started in one (``ip netns exec``) whose readiness check
must run there too, and for tests/cluster/netlab.py's hosts.

A thread moved into a namespace stays there until moved back; threads it
starts meanwhile are born there and stay for their whole life."""

from __future__ import annotations

import contextlib
import ctypes
import os
from pathlib import Path

NETNS_DIR = Path("/var/run/netns")  # where ``ip netns`` names its namespaces
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextlib.contextmanager
def entered(netns: str | None):
    """Run the calling thread in network namespace ``netns`` (a name under
    /var/run/netns) for the block, then put it back where it was.  ``None``
    does nothing, so callers can pass an optional namespace straight through."""
    if netns is None:
        yield
        return
    target = os.open(NETNS_DIR / netns, os.O_RDONLY | os.O_CLOEXEC)
    try:
        back = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(back)
        finally:
            os.close(back)
    finally:
        os.close(target)
