"""The client side of a SASL login: a broker's connections to another broker's
SASL listener (followers fetching, transaction markers, verifications), and
the CLI's own requests.  SaslHandshake v1, then the mechanism's tokens in
SaslAuthenticate requests, before any other request on the connection.

``tokens`` is the exchange alone, a generator that yields each token to send
and is sent each answer; ``log_in`` drives it over an asyncio connection and
``log_in_blocking`` over a blocking one.
"""

from __future__ import annotations

from collections.abc import Callable, Generator

from kio.schema.sasl_authenticate.v1.request import SaslAuthenticateRequest
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

from hpbroker.errors import ErrorCode
from hpbroker.security import plain, scram
from hpbroker.security.settings import PLAIN, Login


class LoginFailed(ConnectionError):
    """The broker refused the login."""


def tokens(login: Login) -> Generator[bytes, bytes, None]:
    if login.mechanism == PLAIN:
        yield plain.message(login.user, login.password)
        return
    exchange = scram.ScramClient(login.mechanism, login.user, login.password)
    try:
        server_first = yield exchange.first()
        server_final = yield exchange.final(server_first)
        exchange.check(server_final)
    except scram.ScramError as exc:
        raise LoginFailed(f"SASL {login.mechanism}: {exc}") from None


def _handshake_checked(login: Login, answer) -> None:
    if answer.error_code != ErrorCode.none:
        raise LoginFailed(f"SASL handshake with {login.mechanism}: {answer.error_code.name} "
                          f"(the broker offers {', '.join(answer.mechanisms) or 'nothing'})")


def _token_checked(answer) -> bytes:
    if answer.error_code != ErrorCode.none:
        raise LoginFailed(f"SASL login refused: {answer.error_code.name}: {answer.error_message}")
    return answer.auth_bytes


async def log_in(connection, login: Login) -> None:
    """Authenticate ``connection`` (a ``replication.client.ClientConnection``) as ``login``."""
    _handshake_checked(login, await connection.send(SaslHandshakeRequest(mechanism=login.mechanism)))
    exchange = tokens(login)
    token = next(exchange)
    while True:
        answer = _token_checked(await connection.send(SaslAuthenticateRequest(auth_bytes=token)))
        try:
            token = exchange.send(answer)
        except StopIteration:
            return


def log_in_blocking(request: Callable, login: Login) -> None:
    """The same over ``request(kio request) -> kio response``, a blocking round trip."""
    _handshake_checked(login, request(SaslHandshakeRequest(mechanism=login.mechanism)))
    exchange = tokens(login)
    token = next(exchange)
    while True:
        answer = _token_checked(request(SaslAuthenticateRequest(auth_bytes=token)))
        try:
            token = exchange.send(answer)
        except StopIteration:
            return
