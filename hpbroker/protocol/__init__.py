"""Sans-io Kafka wire protocol: bytes in, objects out, and back.

Nothing here touches a socket or a file, and nothing imports the rest of hpbroker
but its shared leaf modules (Kafka's error table is ``hpbroker.errors``).
Message bodies are kio dataclasses (kio is generated from Kafka's message specs).

* ``framing``: size-prefixed frames out of a byte stream.
* ``header``: request headers v0-v2, response headers v0-v1.
* ``schemas``: which kio class and header version go with an (api key, version).
* ``codec``: ``decode_request`` / ``encode_response``.
* ``client_codec``: the other side, ``encode_request`` / ``decode_response``.
* ``legacy_produce``: Produce v0-v2, which kio does not describe.
* ``versions``: the advertised version table and the ApiVersions response.
* ``exceptions``: this package's exceptions.
"""

from hpbroker.errors import ErrorCode

from .codec import decode_body, decode_request, encode_response
from .exceptions import (
    FrameTooLarge,
    MalformedRequest,
    ProtocolError,
    UnsupportedApiKey,
    UnsupportedRequest,
    UnsupportedVersion,
)
from .framing import DEFAULT_MAX_REQUEST_BYTES, FrameReader, frame
from .header import RequestHeader, encode_response_header, parse_request_header
from .schemas import request_type, response_type
from .versions import SUPPORTED_VERSIONS, api_versions_response, unsupported_api_versions_response

__all__ = [
    "DEFAULT_MAX_REQUEST_BYTES", "ErrorCode", "FrameReader", "FrameTooLarge", "MalformedRequest",
    "ProtocolError", "RequestHeader", "SUPPORTED_VERSIONS", "UnsupportedApiKey", "UnsupportedRequest",
    "UnsupportedVersion", "api_versions_response", "decode_body", "decode_request", "encode_response",
    "encode_response_header", "frame", "parse_request_header", "request_type", "response_type",
    "unsupported_api_versions_response",
]
