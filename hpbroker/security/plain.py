"""The PLAIN mechanism (RFC 4616): one message, ``authzid NUL user NUL password``,
checked against the users of the listener's PlainLoginModule entry."""

from __future__ import annotations

import hmac
from collections.abc import Mapping


class PlainError(Exception):
    """A malformed message or a wrong user or password."""


def authenticate(message: bytes, users: Mapping[str, str]) -> str:
    """The user ``message`` proves to be (PlainError when it proves nothing)."""
    parts = message.split(b"\x00")
    if len(parts) != 3:
        raise PlainError("a PLAIN message is authzid NUL user NUL password")
    try:
        authzid, user, password = (part.decode() for part in parts)
    except UnicodeDecodeError:
        raise PlainError("a PLAIN message must be UTF-8") from None
    if not user or not password:
        raise PlainError("a PLAIN message needs a user and a password")
    if authzid and authzid != user:
        raise PlainError("an authorization id other than the user is not supported")
    expected = users.get(user)
    # compared even for an unknown user, so the time taken does not tell which users exist
    matches = hmac.compare_digest(password.encode(), (expected if expected is not None else "\x00" + password).encode())
    if expected is None or not matches:
        raise PlainError("invalid user name or password")
    return user


def message(user: str, password: str) -> bytes:
    return b"\x00" + user.encode() + b"\x00" + password.encode()
