"""Real network partitions between "hosts" on one machine.

A ``NetLab`` is a private network of its own, invisible from the machine's
root network namespace:

* one "lab" namespace holding a Linux bridge (``br0``);
* one namespace per host, joined to the bridge by a veth pair (``eth0`` on the
  host's side, ``v<N>`` on the bridge's), with loopback up and an address in
  ``10.213.0.0/24``.  Every lab lives in namespaces of its own, so two labs
  (of this run or of another run on the same machine) never clash even though
  they use the same addresses; nothing is added to the root namespace.

Faults are nftables rules in a table of the lab's own (``inet hpnetlab``)
inside each host's namespace: a set of blocked peer addresses and one rule
dropping every packet *arriving* from them.  Both ends of a cut drop what the
other sends, so both directions are lost while every sender believes its
packets left: connects hang, established TCP connections stall and time out as
they do behind a real partition (nothing is rejected, no RST, no ICMP).

    with NetLab() as lab:
        a, b = lab.add_host("a"), lab.add_host("b")
        server = a.popen([sys.executable, "-m", "http.server", "--bind", a.ip])
        with lab.inside(b):            # this thread now lives on host b
            socket.create_connection((a.ip, 8000))
        lab.cut(a, b)                  # ... hangs now
        lab.heal()

``lab.inside(host)`` moves the *calling thread* into the host's namespace
(``setns(2)``) and back on exit.  Threads started while inside (librdkafka's,
kazoo's, ``threading.Thread``) inherit that namespace and stay in it for
their whole life, after the ``with`` block too: create clients inside and the
test process becomes a client host.  Sockets keep the namespace they were
created in, and processes started from a thread inside run on the host too.

Namespace names carry the creating process's pid (``hpnl-<pid>-<n>-...``); a
lab sweeps namespaces left by processes that no longer exist (crashed runs)
before it builds its own, and deletes its own on close, after killing any
process still running in them (all of them were started on this lab's hosts).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
from dataclasses import dataclass, field

from harness.netns import NETNS_DIR, entered

PREFIX = "hpnl"
SUBNET = "10.213.0"  # a /24; host N gets .N+10
TABLE = "hpnetlab"
_NAME = re.compile(r"^[a-z][a-z0-9]{0,11}$")
_OURS = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-")
_counter = itertools.count(1)


def _run(argv: list[str], input: str | None = None) -> str:
    done = subprocess.run(argv, input=input, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def _namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return []


def _pids_in(netns: str) -> set[int]:
    try:
        return {int(p) for p in _run(["ip", "netns", "pids", netns]).split()}
    except RuntimeError:
        return set()


def _delete_namespace(netns: str) -> None:
    subprocess.run(["ip", "netns", "delete", netns], capture_output=True)


def sweep_stale() -> list[str]:
    """Delete the lab namespaces whose creating process is gone; returns their names."""
    swept = []
    for name in _namespaces():
        match = _OURS.match(name)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid == os.getpid():
            if any(name.startswith(lab.prefix) for lab in _live_labs):
                continue
        else:
            try:
                os.kill(pid, 0)
                continue  # another live run's lab
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        _delete_namespace(name)
        swept.append(name)
    return swept


_live_labs: list["NetLab"] = []


# --- hosts and the lab --------------------------------------------------------------
@dataclass(eq=False)
class Host:
    name: str
    ip: str
    netns: str
    index: int
    blocked: frozenset = field(default=frozenset(), repr=False)  # addresses dropped now

    def command(self, argv: list[str]) -> list[str]:
        """``argv`` run on this host (through ``ip netns exec``)."""
        return ["ip", "netns", "exec", self.netns, *map(str, argv)]

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.command(argv), **kw)

    def run(self, argv: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(argv), **kw)

    def __str__(self) -> str:
        return f"{self.name}({self.ip})"


class NetLab:
    """A bridge in a namespace of its own and a namespace per host; see the module doc."""

    def __init__(self):
        self.prefix = f"{PREFIX}-{os.getpid()}-{next(_counter)}-"
        self.lab_netns = self.prefix + "bridge"
        self.hosts: dict[str, Host] = {}
        self._cuts: set[frozenset] = set()
        self._up = False

    # --- life cycle ------------------------------------------------------------------
    def __enter__(self) -> "NetLab":
        return self.open()

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> "NetLab":
        sweep_stale()
        _live_labs.append(self)
        self._up = True
        try:
            _run(["ip", "netns", "add", self.lab_netns])
            lab = ["ip", "-n", self.lab_netns]
            _run(lab + ["link", "set", "lo", "up"])
            _run(lab + ["link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0"])
            _run(lab + ["link", "set", "br0", "up"])
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill what still runs on the lab's hosts and delete every namespace of the lab."""
        if not self._up:
            return
        self._up = False
        mine = [n for n in _namespaces() if n.startswith(self.prefix)]
        for netns in mine:
            for pid in _pids_in(netns) - {os.getpid()}:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for netns in mine:
            _delete_namespace(netns)
        if self in _live_labs:
            _live_labs.remove(self)

    def namespaces(self) -> list[str]:
        """The namespaces of this lab that exist now."""
        return [n for n in _namespaces() if n.startswith(self.prefix)]

    # --- hosts -----------------------------------------------------------------------
    def add_host(self, name: str) -> Host:
        """A new host on the bridge, reaching every other host (until a fault says otherwise)."""
        assert self._up, "the lab is closed"
        assert _NAME.match(name), f"host name {name!r}: lower-case letters and digits, at most 12"
        assert name not in self.hosts, f"host {name!r} exists"
        index = len(self.hosts) + 1
        assert index <= 200
        host = Host(name, f"{SUBNET}.{index + 10}", f"{self.prefix}h-{name}", index)
        _run(["ip", "netns", "add", host.netns])
        self.hosts[name] = host
        lab, there = ["ip", "-n", self.lab_netns], ["ip", "-n", host.netns]
        port = f"v{index}"
        _run(lab + ["link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host.netns])
        _run(lab + ["link", "set", port, "master", "br0", "up"])
        _run(there + ["link", "set", "lo", "up"])
        _run(there + ["addr", "add", f"{host.ip}/24", "dev", "eth0"])
        _run(there + ["link", "set", "eth0", "up"])
        _run(host.command(["nft", "-f", "-"]), input=(
            f"table inet {TABLE} {{\n"
            f"  set blocked {{ type ipv4_addr; }}\n"
            f"  chain input {{ type filter hook input priority -10; policy accept; ip saddr @blocked drop; }}\n"
            f"}}\n"))
        return host

    def host(self, host: Host | str) -> Host:
        return self.hosts[host] if isinstance(host, str) else host

    @contextlib.contextmanager
    def inside(self, host: Host | str):
        """Move the calling thread onto ``host`` for the block (see the module doc:
        threads started inside stay there)."""
        with entered(self.host(host).netns):
            yield

    # --- faults ----------------------------------------------------------------------
    def cut(self, a: Host | str, b: Host | str) -> None:
        """``a`` and ``b`` no longer reach each other (both directions dropped)."""
        self.split([a], [b])

    def isolate(self, a: Host | str) -> None:
        """``a`` reaches no other host of the lab (hosts added later excepted)."""
        a = self.host(a)
        self.split([a], [h for h in self.hosts.values() if h is not a])

    def split(self, group1, group2) -> None:
        """No host of ``group1`` reaches any host of ``group2``; others unchanged."""
        for a in map(self.host, group1):
            for b in map(self.host, group2):
                if a is not b:
                    self._cuts.add(frozenset((a.name, b.name)))
        self._apply()

    def heal(self) -> None:
        """Every host reaches every host again."""
        self._cuts.clear()
        self._apply()

    def blocked(self, a: Host | str, b: Host | str) -> bool:
        return frozenset((self.host(a).name, self.host(b).name)) in self._cuts

    def _apply(self) -> None:
        """Bring each host's set of dropped addresses to what the cuts say, touching
        only hosts whose set changes (one atomic nft transaction each)."""
        for host in self.hosts.values():
            wanted = frozenset(self.hosts[other].ip for cut in self._cuts if host.name in cut
                               for other in cut if other != host.name)
            if wanted == host.blocked:
                continue
            script = f"flush set inet {TABLE} blocked\n"
            if wanted:
                script += f"add element inet {TABLE} blocked {{ {', '.join(sorted(wanted))} }}\n"
            _run(host.command(["nft", "-f", "-"]), input=script)
            host.blocked = wanted
