"""A small JSON file that every worker of a broker may rewrite (users'
credentials, ACLs standalone): rewritten whole under an exclusive lock on a
file beside it, written to a temporary file, fsynced and renamed into place,
so a crash leaves the old document or the new one, never half of either."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable


def read(path: str) -> dict:
    """The document (empty when there is no file yet); OSError or ValueError
    when it cannot be read or is not a JSON object."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except FileNotFoundError:
        return {}
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


def rewrite(path: str, change: Callable[[dict], dict]) -> None:
    """``change(document now)`` written in its place (OSError, ValueError pass through)."""
    lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        document = change(read(path))
        temporary = path + ".tmp"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
        directory = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
    finally:
        os.close(lock)
