"""DescribeUserScramCredentials (50): which SCRAM mechanisms each user has a
credential for, and its iterations (never the credential itself)."""

from collections import Counter

from hpbroker.errors import ErrorCode
from hpbroker.security import scram
from hpbroker.security.credentials import CredentialStoreError
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 50


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    try:
        stored = await ctx.credentials.all()
    except CredentialStoreError as exc:
        return make(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.kafka_storage_error, error_message=str(exc), results=())
    wanted = [u.name for u in request.users] if request.users else sorted(u for u, c in stored.items() if c)
    counts = Counter(wanted)
    results = []
    for user in dict.fromkeys(wanted):
        infos = stored.get(user) or {}
        if counts[user] > 1:
            error, message = ErrorCode.duplicate_resource, "Cannot describe SCRAM credentials for the same user twice"
        elif not infos:
            error, message = ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist"
        else:
            error, message = ErrorCode.none, None
        credential_infos = () if error else tuple(
            make(m.CredentialInfo, mechanism=scram.MECHANISM_NUMBERS[name], iterations=credential.iterations)
            for name, credential in sorted(infos.items()) if name in scram.MECHANISM_NUMBERS)
        results.append(make(m.DescribeUserScramCredentialsResult, user=user, error_code=error, error_message=message,
                            credential_infos=credential_infos))
    return make(m.DescribeUserScramCredentialsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, results=tuple(results))
