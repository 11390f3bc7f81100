"""The exceptions the protocol layer raises, one type per thing a server must tell apart.

* ``FrameTooLarge``: the size prefix is negative or above ``socket.request.max.bytes``;
  the stream cannot be resynchronised, so the connection must be closed.
* ``UnsupportedApiKey`` / ``UnsupportedVersion``: the request is well framed but not
  one we answer; both carry the parsed header so ApiVersions can still be answered
  (error 35) and everything else logged with the client id, then closed.
* ``MalformedRequest``: a truncated or garbled header or body. Every decoding failure,
  whatever raised it inside the decoder, surfaces as this one type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .header import RequestHeader


class ProtocolError(Exception):
    """Base of every error raised by ``hpbroker.protocol``."""


class FrameTooLarge(ProtocolError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"invalid request size {size} (socket.request.max.bytes is {limit})")
        self.size = size
        self.limit = limit


class MalformedRequest(ProtocolError):
    """A request frame that cannot be decoded."""


class UnsupportedRequest(ProtocolError):
    """Base for requests that decode fine up to the header but which we do not serve."""

    def __init__(self, header: RequestHeader, message: str) -> None:
        super().__init__(message)
        self.header = header


class UnsupportedApiKey(UnsupportedRequest):
    def __init__(self, header: RequestHeader) -> None:
        super().__init__(header, f"unsupported api key {header.api_key} "
                                 f"(version {header.api_version}, client {header.client_id!r})")


class UnsupportedVersion(UnsupportedRequest):
    def __init__(self, header: RequestHeader, min_version: int, max_version: int) -> None:
        super().__init__(header, f"unsupported version {header.api_version} of api key "
                                 f"{header.api_key} (supported {min_version}..{max_version}, "
                                 f"client {header.client_id!r})")
        self.min_version = min_version
        self.max_version = max_version
