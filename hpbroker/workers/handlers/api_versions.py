"""ApiVersions (18): the version ranges from ``protocol.versions``."""

from hpbroker.protocol import api_versions_response

API_KEY = 18


async def handle(ctx, header, request):
    return api_versions_response(header.api_version)
