"""One connection's SASL authentication, as Kafka's broker runs it.

On a SASL listener a connection may send only ApiVersions until it is
authenticated.  SaslHandshake names the mechanism; then the mechanism's
tokens go back and forth, wrapped in SaslAuthenticate requests (handshake v1,
what current clients send) or bare, each with a four-byte length and nothing
else (handshake v0).  Anything out of that order, and every failed login, is
answered when an answer exists (ILLEGAL_SASL_STATE, UNSUPPORTED_SASL_MECHANISM,
SASL_AUTHENTICATION_FAILED with the reason) and then the connection is
closed, as Kafka does; the client's next connection starts afresh.

Once authenticated the connection's principal is ``User:<name>``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from enum import Enum

from hpbroker.errors import ErrorCode
from hpbroker.security import plain, scram
from hpbroker.security.credentials import CredentialStoreError
from hpbroker.security.settings import PLAIN, ListenerSecurity

log = logging.getLogger(__name__)

SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS = 17, 36, 18
ALLOWED_BEFORE = frozenset({API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE})


class Stage(Enum):
    HANDSHAKE = "handshake"  # a mechanism is to be chosen
    TOKENS = "tokens"  # tokens in SaslAuthenticate requests (handshake v1)
    RAW_TOKENS = "raw tokens"  # bare tokens (handshake v0)
    DONE = "authenticated"
    FAILED = "failed"  # answered; the connection closes


class SaslFailure(Exception):
    """The login failed: ``code`` and a message for the client; ``detail`` for
    the log only (the client is not told whether the user exists)."""

    def __init__(self, code: ErrorCode, message: str, detail: str = ""):
        super().__init__(message)
        self.code = code
        self.detail = detail or message


class SaslSession:
    def __init__(self, security: ListenerSecurity, credentials, failure_delay_s: float = 0.0):
        self.security = security
        self.credentials = credentials  # credentials.FileCredentials or ZooKeeperCredentials
        # Kafka's connection.failed.authentication.delay.ms: a password guesser waits for each refusal
        self.failure_delay_s = failure_delay_s
        self.stage = Stage.HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram: scram.ScramServer | None = None
        self._scram_step = 0

    @property
    def authenticated(self) -> bool:
        return self.stage is Stage.DONE

    @property
    def failed(self) -> bool:
        return self.stage is Stage.FAILED

    def handshake(self, version: int, mechanism: str) -> ErrorCode:
        """SaslHandshake: ILLEGAL_SASL_STATE out of turn, UNSUPPORTED_SASL_MECHANISM
        for one not enabled (both end the connection), else none."""
        if self.stage is not Stage.HANDSHAKE:
            self.stage = Stage.FAILED
            return ErrorCode.illegal_sasl_state
        if mechanism not in self.security.mechanisms:
            self.stage = Stage.FAILED
            return ErrorCode.unsupported_sasl_mechanism
        self.mechanism = mechanism
        self.stage = Stage.TOKENS if version >= 1 else Stage.RAW_TOKENS
        return ErrorCode.none

    async def authenticate(self, token: bytes) -> bytes:
        """The mechanism's next token for the client; SaslFailure ends the login
        (the session is then FAILED), raised after ``failure_delay_s``."""
        try:
            if self.stage not in (Stage.TOKENS, Stage.RAW_TOKENS):
                raise SaslFailure(ErrorCode.illegal_sasl_state,
                                  "SaslAuthenticate before SaslHandshake" if self.stage is Stage.HANDSHAKE
                                  else "SaslAuthenticate after the login ended (re-authentication is not supported)")
            if self.mechanism == PLAIN:
                return self._done(self._plain(token))
            return await self._scram_token(token)
        except SaslFailure:
            self.stage = Stage.FAILED
            await asyncio.sleep(self.failure_delay_s)
            raise

    def _plain(self, token: bytes) -> str:
        try:
            return plain.authenticate(token, self.security.plain_users)
        except plain.PlainError as exc:
            raise SaslFailure(ErrorCode.sasl_authentication_failed,
                              "Authentication failed: Invalid username or password", f"PLAIN: {exc}") from None

    async def _scram_token(self, token: bytes) -> bytes:
        assert self.mechanism is not None
        try:
            if self._scram_step == 0:
                self._scram = exchange = scram.ScramServer(self.mechanism)
                user = exchange.client_first(token)
                try:
                    credential = (await self.credentials.get(user)).get(self.mechanism)
                except CredentialStoreError as exc:
                    log.error("the SCRAM credentials cannot be read: %s", exc)
                    raise scram.ScramError("the credentials cannot be read now") from None
                self._scram_step = 1
                return exchange.server_first(credential)
            assert self._scram is not None
            final = self._scram.client_final(token)
            assert self._scram.user is not None
            self._done(self._scram.user)
            return final
        except scram.ScramError as exc:
            user = self._scram.user if self._scram is not None else None
            named = repr(user if user is None or len(user) <= 64 else user[:64] + "...")  # bounded in the log
            raise SaslFailure(ErrorCode.sasl_authentication_failed,
                              f"Authentication failed during authentication due to invalid credentials with SASL "
                              f"mechanism {self.mechanism}", f"{self.mechanism} as {named}: {exc}") from None

    def _done(self, user: str) -> bytes:
        self.principal = f"User:{user}"
        self.stage = Stage.DONE
        return b""


# the connection's session, for the SaslHandshake and SaslAuthenticate handlers (None: not a SASL listener)
SESSION: contextvars.ContextVar[SaslSession | None] = contextvars.ContextVar("sasl_session", default=None)
