"""systemd's notification protocol (sd_notify), spoken without libsystemd.

Each call sends one datagram of ``KEY=value`` lines to ``$NOTIFY_SOCKET`` (a
path, or an abstract name written with a leading ``@``); without that
variable, as outside systemd, every call does nothing.  The watchdog interval
comes from ``$WATCHDOG_USEC`` (honoured only when ``$WATCHDOG_PID`` is unset
or names us).
"""

import logging
import os
import socket
import time

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ=None):
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self.address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        self.watchdog_s = int(usec) / 1e6 if usec.isdigit() and (not pid or pid == str(os.getpid())) else 0.0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) if self.address else None

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, **fields) -> None:
        if self._sock is None:
            return
        text = "\n".join(f"{key.upper()}={value}" for key, value in fields.items())
        try:
            self._sock.sendto(text.encode(), self.address)
        except OSError as exc:
            log.warning("sd_notify to %s failed: %s", self.address.lstrip("\0"), exc)

    def ready(self, status: str) -> None:
        self.send(ready=1, status=status)

    def status(self, status: str) -> None:
        self.send(status=status)

    def watchdog(self) -> None:
        self.send(watchdog=1)

    def reloading(self) -> None:
        self.send(reloading=1, monotonic_usec=time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000)

    def stopping(self) -> None:
        self.send(stopping=1, status="stopping: finishing requests, flushing logs")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
