"""Kafka's numeric error codes: one table for the wire and the disk.

kio ships them as ``kio.schema.errors.ErrorCode`` (an IntEnum with a
``retriable`` flag, member names in lower case), and kio's encoders require
its members (they write ``code.value``; a plain int fails). So this module
re-exports that enum, and every layer that answers with a Kafka error (the
storage exceptions, producer-state verdicts, the partition service, the group
coordinator, the handlers) holds members of it from the start: a code never
has to be wrapped on its way out.

One spelling: ``ErrorCode.unknown_topic_or_partition`` (kio's member names,
Kafka's in lower case), which type checkers and editors see.

A leaf module: it imports nothing of hpbroker, so every package may use it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode"]
