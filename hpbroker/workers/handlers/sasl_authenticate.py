"""SaslAuthenticate (36): one token of the mechanism's exchange each way.  A
failed login is answered with its reason (SASL_AUTHENTICATION_FAILED), after
``connection.failed.authentication.delay.ms`` (the session waits it out), and
the connection then closes (``security/sasl.py``); the connection logs a
login that succeeds."""

import logging

from hpbroker.errors import ErrorCode
from hpbroker.security import sasl
from hpbroker.server.logging_setup import Throttled
from hpbroker.workers.client_identity import CLIENT_HOST
from hpbroker.workers.kio_build import make, response_module

API_KEY = 36
log = logging.getLogger(__name__)
# a client with a wrong password retries over and over: once a minute per client host
_failures = Throttled(log)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    session = sasl.SESSION.get()
    if session is None:
        return make(m.SaslAuthenticateResponse, error_code=ErrorCode.illegal_sasl_state,
                    error_message="this listener does not use SASL", auth_bytes=b"")
    try:
        token = await session.authenticate(request.auth_bytes)
    except sasl.SaslFailure as exc:
        _failures.log(logging.WARNING, CLIENT_HOST.get(), "failed login from %s (client %r): %s",
                      CLIENT_HOST.get(), header.client_id[:64] if header.client_id else None, exc.detail)
        return make(m.SaslAuthenticateResponse, error_code=exc.code, error_message=str(exc), auth_bytes=b"")
    return make(m.SaslAuthenticateResponse, error_code=ErrorCode.none, error_message=None, auth_bytes=token)
