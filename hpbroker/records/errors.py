"""Errors raised while reading record data.

Every problem with the bytes themselves is a :class:`CorruptRecordError`, a
``ValueError`` so callers that only care about "bad input" can catch that.  The
subclasses let a reader tell a torn tail (more bytes may still arrive, or the
file was cut by a crash) from bytes that are present but wrong.
"""


class CorruptRecordError(ValueError):
    """The bytes do not form a valid record, batch or message."""


class TruncatedRecordError(CorruptRecordError):
    """The buffer ends before the structure being read does."""


class InvalidCrcError(CorruptRecordError):
    """The stored checksum does not match the bytes it covers."""

    def __init__(self, message: str, *, stored: int, computed: int):
        super().__init__(message)
        self.stored = stored
        self.computed = computed


class UnknownCodecError(CorruptRecordError):
    """A compression codec id outside none/gzip/snappy/lz4/zstd."""
