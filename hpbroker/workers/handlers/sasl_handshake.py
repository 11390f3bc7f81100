"""SaslHandshake (17): the mechanism a connection on a SASL listener logs in with
(``security/sasl.py``).  On a PLAINTEXT listener, or once logged in, it is
out of turn: ILLEGAL_SASL_STATE, as Kafka answers."""

from hpbroker.errors import ErrorCode
from hpbroker.security import sasl
from hpbroker.workers.kio_build import make, response_module

API_KEY = 17


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    session = sasl.SESSION.get()
    if session is None:
        return make(m.SaslHandshakeResponse, error_code=ErrorCode.illegal_sasl_state, mechanisms=())
    error = session.handshake(header.api_version, request.mechanism)
    return make(m.SaslHandshakeResponse, error_code=error, mechanisms=session.security.mechanisms)
