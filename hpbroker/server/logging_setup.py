"""Logging to stderr, readable by a person, journald or a log shipper.

* ``text`` (the default): time, level, pid, logger, message; under systemd
  (``$JOURNAL_STREAM`` set) the time is left to journald and each line starts
  with its syslog priority (``<3>`` for errors, sd-daemon's convention), so
  ``journalctl -p err`` finds them.
* ``json``: one object per line with the same fields plus any ``context``
  a caller attached (client, API, correlation id of a failing request).
"""

import json
import logging
import os
import sys
import time

_PRIORITY = {logging.CRITICAL: 2, logging.ERROR: 3, logging.WARNING: 4, logging.INFO: 6, logging.DEBUG: 7}


class _JournalFormatter(logging.Formatter):
    def format(self, record):
        return f"<{_PRIORITY.get(record.levelno, 6)}>" + super().format(record)


class _JsonFormatter(logging.Formatter):
    def format(self, record):
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "pid": record.process,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, "context", None) or {})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    elif os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("[%(process)d] %(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level))


_MAX_KEYS = 4096  # problems told apart at once; beyond, those not logged within the interval are forgotten


class Throttled:
    """Logs a recurring problem once, then at most once per ``interval_s`` with
    how often it recurred meanwhile: a fault that repeats on every request or
    tick must not flood the log.  ``key`` tells problems apart."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0):
        self.logger = logger
        self.interval_s = interval_s
        self._last: dict[object, tuple[float, int]] = {}  # key -> (time logged, repeats since)

    def log(self, level: int, key: object, message: str, *args) -> None:
        now = time.monotonic()
        if len(self._last) >= _MAX_KEYS:  # keys from strangers (their hosts) must not grow without bound
            self._last = {k: v for k, v in self._last.items() if now - v[0] < self.interval_s}
            if len(self._last) >= _MAX_KEYS:  # all recent: start afresh rather than sift on every call
                self._last.clear()
        logged, repeats = self._last.get(key, (None, 0))
        if logged is not None and now - logged < self.interval_s:
            self._last[key] = (logged, repeats + 1)
            return
        suffix = f" (repeated {repeats} times since last logged)" if repeats else ""
        self.logger.log(level, message + suffix, *args)
        self._last[key] = (now, 0)
