"""ApiVersions (18): the advertised table, and the answer to a version we do not know."""

import pytest

from hpbroker.errors import ErrorCode
from hpbroker.protocol.versions import SUPPORTED_VERSIONS
from hpbroker.workers.handlers import ROUTES
from tests.handlers.conftest import API_VERSIONS_KEY, request


def ranges(response) -> dict:
    return {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}


def test_every_advertised_api_has_a_handler():
    assert set(ROUTES) == set(SUPPORTED_VERSIONS)


@pytest.mark.parametrize("version", [0, 3])
def test_the_answer_lists_the_advertised_ranges(broker, version):
    answer = broker.send(request(API_VERSIONS_KEY, version, client_software_name="tests",
                                 client_software_version="1.0"))
    assert answer.error_code == ErrorCode.none
    assert ranges(answer) == dict(SUPPORTED_VERSIONS)
    assert hasattr(answer, "throttle_time") == (version >= 1)


def test_an_unknown_version_is_answered_v0_with_apiversions_own_range(broker):
    """A client opening with a newer ApiVersions than ours reads a v0 answer:
    UNSUPPORTED_VERSION and the range to retry with."""
    newest = SUPPORTED_VERSIONS[API_VERSIONS_KEY][1]
    answer = broker.send(request(API_VERSIONS_KEY, newest, client_software_name="tests",
                                 client_software_version="1.0"), version=newest + 5)
    assert answer.error_code == ErrorCode.unsupported_version
    assert int(answer.__version__) == 0
    assert ranges(answer) == {API_VERSIONS_KEY: SUPPORTED_VERSIONS[API_VERSIONS_KEY]}
