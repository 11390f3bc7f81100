"""SaslHandshake (17): the mechanism a connection on a SASL listener logs in with
(``security/sasl.py``).  On a PLAINTEXT listener, or once logged in, it is
out of turn: ILLEGAL_SASL_STATE, as Kafka answers."""

import logging

from hpbroker.errors import ErrorCode
from hpbroker.security import sasl
from hpbroker.server.logging_setup import Throttled
from hpbroker.workers.client_identity import CLIENT_HOST
from hpbroker.workers.kio_build import make, response_module

API_KEY = 17
log = logging.getLogger(__name__)
_refusals = Throttled(log)  # a misconfigured client asks again and again: once a minute per host


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    session = sasl.SESSION.get()
    if session is None:
        return make(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = session.handshake(header.api_version, request.mechanism)
    if error == ErrorCode.unsupported_sasl_mechanism:
        _refusals.log(logging.WARNING, CLIENT_HOST.get(), "SASL mechanism %r asked for by %s (client %r); this "
                      "listener has %s", request.mechanism[:64], CLIENT_HOST.get(),
                      header.client_id[:64] if header.client_id else None, ", ".join(session.security.mechanisms))
    return make(m.SaslHandshakeResponse, error_code=error, mechanisms=session.security.mechanisms)
