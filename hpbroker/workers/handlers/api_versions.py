"""ApiVersions (18): the version ranges from ``protocol.versions``."""

from hpbroker.protocol import api_versions_response
from hpbroker.protocol.schemas import API_VERSIONS

API_KEY = API_VERSIONS


async def handle(ctx, header, request):
    return api_versions_response(header.api_version)
