"""Kafka's numeric error codes, as the wire carries them.

kio already ships them as ``kio.schema.errors.ErrorCode`` (an IntEnum with a
``retriable`` flag, member names in lower case), and kio's encoders require
its members (they write ``code.value``; a plain int fails). So we re-export
that enum and add module constants spelled as Kafka spells them
(``UNKNOWN_TOPIC_OR_PARTITION``), each bound to kio's member, so handler code
can read like Kafka's documentation and still feed kio's encoders.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

# Kafka-style aliases: UNSUPPORTED_VERSION is ErrorCode.unsupported_version.
globals().update({member.name.upper(): member for member in ErrorCode})

__all__ = ["ErrorCode", *(member.name.upper() for member in ErrorCode)]
