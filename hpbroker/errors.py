"""Kafka's numeric error codes: one table for the wire and the disk.

kio ships them as ``kio.schema.errors.ErrorCode`` (an IntEnum with a
``retriable`` flag, member names in lower case), and kio's encoders require
its members (they write ``code.value``; a plain int fails). So this module
re-exports that enum, and every layer that answers with a Kafka error (the
storage exceptions, producer-state verdicts, the partition service, the group
coordinator, the handlers) holds members of it from the start: a code never
has to be wrapped on its way out.

Module constants spelled as Kafka spells them (``UNKNOWN_TOPIC_OR_PARTITION``)
are bound to the same members, so code can read like Kafka's documentation.

A leaf module: it imports nothing of hpbroker, so every package may use it.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

# Kafka-style aliases: UNSUPPORTED_VERSION is ErrorCode.unsupported_version.
globals().update({member.name.upper(): member for member in ErrorCode})

__all__ = ["ErrorCode", *(member.name.upper() for member in ErrorCode)]
