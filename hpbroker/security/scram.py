"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka speaks them.

A stored credential never holds the password: only the salt, the iteration
count and two keys derived from the salted password (``StoredKey`` checks a
client's proof, ``ServerKey`` proves the server knew the credential).  Kafka
writes it as ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``;
so do we, so a ZooKeeper written by Kafka's tools reads here.

``ScramServer`` runs the broker's side of one exchange: client-first,
server-first, client-final, server-final.  ``ScramClient`` the other side, for
a broker logging in to another.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import secrets
from dataclasses import dataclass

MECHANISMS = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# AlterUserScramCredentials / DescribeUserScramCredentials name them by number
MECHANISM_IDS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}
MECHANISM_NUMBERS = {name: number for number, name in MECHANISM_IDS.items()}
MIN_ITERATIONS = 4096  # Kafka's bounds for a credential
MAX_ITERATIONS = 16384


class ScramError(Exception):
    """The exchange cannot go on: a malformed message, or credentials that do not match."""


@dataclass(frozen=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def encode(self) -> str:
        b64 = base64.b64encode
        return (f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
                f"server_key={b64(self.server_key).decode()},iterations={self.iterations}")

    @classmethod
    def decode(cls, text: str) -> "ScramCredential":
        fields = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        try:
            return cls(base64.b64decode(fields["salt"], validate=True),
                       base64.b64decode(fields["stored_key"], validate=True),
                       base64.b64decode(fields["server_key"], validate=True), int(fields["iterations"]))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"not a SCRAM credential ({exc})") from None


def _hmac(digest: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, digest).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode(), salt, iterations)


# A client logs in with the same password, salt and iterations every time: thousands of
# HMACs (milliseconds, on a broker's event loop) once per credential rather than per connection.
_client_salted = functools.lru_cache(maxsize=64)(salted_password)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    digest = MECHANISMS[mechanism]
    client_key = _hmac(digest, salted, b"Client Key")
    return ScramCredential(salt, hashlib.new(digest, client_key).digest(), _hmac(digest, salted, b"Server Key"),
                           iterations)


def make_credential(mechanism: str, password: str, iterations: int = MIN_ITERATIONS,
                    salt: bytes | None = None) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt,
                                  iterations)


def _attributes(message: str) -> list[tuple[str, str]]:
    pairs = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"malformed SCRAM attribute {part[:20]!r}")
        pairs.append((part[0], part[2:]))
    return pairs


def _saslname(name: str) -> str:
    """RFC 5802's escaping of a user name: ``=2C`` is ``,`` and ``=3D`` is ``=``."""
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError("malformed user name")
    return name.replace("=2C", ",").replace("=3D", "=")


def _escape(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramServer:
    """One exchange, broker side.  ``lookup(user)`` is the stored credential for
    the mechanism, or None (an awaitable: it may ask ZooKeeper)."""

    def __init__(self, mechanism: str, nonce: str | None = None):
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self._own_nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()  # given: a test's
        self.user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = self._server_first = self._nonce = ""
        self._gs2_header = ""

    def client_first(self, message: bytes) -> str:
        """Parse the client's first message; the user name it names."""
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("the client-first message is not UTF-8") from None
        flag, _, rest = text.partition(",")
        authzid, _, bare = rest.partition(",")
        if flag not in ("n", "y"):
            raise ScramError("channel binding is not supported" if flag.startswith("p=")
                             else "malformed gs2 header")
        attributes = _attributes(bare)
        if len(attributes) < 2 or attributes[0][0] != "n" or attributes[1][0] != "r" or not attributes[1][1]:
            raise ScramError("the client-first message must start with n=<user>,r=<nonce>")
        user = _saslname(attributes[0][1])
        if authzid and (not authzid.startswith("a=") or _saslname(authzid[2:]) != user):
            raise ScramError("an authorization id other than the user is not supported")
        self.user = user
        self._gs2_header = f"{flag},{authzid},"
        self._client_first_bare = bare
        self._nonce = attributes[1][1] + self._own_nonce
        return user

    def server_first(self, credential: ScramCredential | None) -> bytes:
        if credential is None:
            raise ScramError("unknown user")
        self._credential = credential
        self._server_first = (f"r={self._nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        return self._server_first.encode()

    def client_final(self, message: bytes) -> bytes:
        """Check the client's proof; the server-final message proving ours."""
        credential = self._credential
        if credential is None:
            raise ScramError("client-final before client-first")
        try:
            text = message.decode()
        except UnicodeDecodeError:
            raise ScramError("the client-final message is not UTF-8") from None
        attributes = _attributes(text)
        values = dict(attributes)
        if [name for name, _ in attributes[:2]] != ["c", "r"] or attributes[-1][0] != "p":
            raise ScramError("the client-final message must be c=...,r=...,...,p=...")
        if values["c"] != base64.b64encode(self._gs2_header.encode()).decode():
            raise ScramError("channel binding does not match the client-first message")
        # Kafka checks only that the nonce ends with the one it sent, and older librdkafka
        # (2.0.2, Debian's kcat) puts its own nonce in front twice: taken as Kafka takes it
        if not values["r"].endswith(self._nonce):
            raise ScramError("the nonce does not match")
        try:
            proof = base64.b64decode(values["p"], validate=True)
        except ValueError:
            raise ScramError("the proof is not base64") from None
        without_proof = text[:text.rindex(",p=")]
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self.digest, credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("invalid credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(hashlib.new(self.digest, client_key).digest(), credential.stored_key):
            raise ScramError("invalid credentials")
        server_signature = _hmac(self.digest, credential.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """One exchange, client side (a broker logging in to another)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None):
        self.mechanism = mechanism
        self.digest = MECHANISMS[mechanism]
        self.password = password
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self._first_bare = f"n={_escape(user)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._first_bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode()
            values = dict(_attributes(text))
            nonce, salt, iterations = values.get("r", ""), values.get("s", ""), values.get("i", "")
            salt_bytes = base64.b64decode(salt, validate=True)
        except (UnicodeDecodeError, ValueError):
            raise ScramError("the server-first message is malformed") from None
        if not nonce.startswith(self._nonce) or not iterations.isdigit() or \
                not MIN_ITERATIONS <= int(iterations) <= MAX_ITERATIONS:
            raise ScramError(f"unexpected server-first message {text[:80]!r}")
        salted = _client_salted(self.mechanism, self.password, salt_bytes, int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = _hmac(self.digest, salted, b"Client Key")
        signature = _hmac(self.digest, hashlib.new(self.digest, client_key).digest(), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        self._server_signature = _hmac(self.digest, _hmac(self.digest, salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def check(self, server_final: bytes) -> None:
        text = server_final.decode(errors="replace")
        try:
            signature = base64.b64decode(text[2:], validate=True) if text.startswith("v=") else b""
        except ValueError:
            signature = b""
        if not self._server_signature or not hmac.compare_digest(signature, self._server_signature):
            raise ScramError(f"the server's signature does not match ({text[:80]!r})")
