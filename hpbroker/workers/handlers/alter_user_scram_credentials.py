"""AlterUserScramCredentials (51): add, replace or delete users' SCRAM
credentials.  The client salts the password (so it never crosses the wire);
the broker derives the stored and server keys from it and keeps those
(``security/credentials.py``).  Each user's changes succeed or fail together,
with Kafka's errors: UNSUPPORTED_SASL_MECHANISM, UNACCEPTABLE_CREDENTIAL
(empty name or salt, iterations outside 4096-16384), DUPLICATE_RESOURCE (a
user's mechanism named twice), RESOURCE_NOT_FOUND (deleting what is not
there)."""

from collections import defaultdict

from hpbroker.errors import ErrorCode
from hpbroker.security import scram
from hpbroker.security.credentials import CredentialStoreError
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 51


def _refusal(change, upsert: bool) -> tuple[ErrorCode, str] | None:
    if not change.name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if change.mechanism not in scram.MECHANISM_IDS:
        return ErrorCode.unsupported_sasl_mechanism, f"Unknown SCRAM mechanism {change.mechanism}"
    if upsert:
        if change.iterations < scram.MIN_ITERATIONS:
            return ErrorCode.unacceptable_credential, f"Too few iterations (at least {scram.MIN_ITERATIONS})"
        if change.iterations > scram.MAX_ITERATIONS:
            return ErrorCode.unacceptable_credential, f"Too many iterations (at most {scram.MAX_ITERATIONS})"
        if not change.salt or not change.salted_password:
            return ErrorCode.unacceptable_credential, "The salt and the salted password must not be empty"
    return None


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    errors: dict[str, tuple[ErrorCode, str]] = {}
    changes: dict[str, dict[str, scram.ScramCredential | None]] = defaultdict(dict)
    deletions: dict[str, list[str]] = defaultdict(list)
    order = list(dict.fromkeys(c.name for c in (*request.deletions, *request.upsertions)))
    for change, upsert in [(d, False) for d in request.deletions] + [(u, True) for u in request.upsertions]:
        if change.name in errors:
            continue
        refusal = _refusal(change, upsert)
        mechanism = scram.MECHANISM_IDS.get(change.mechanism, "")
        if refusal is None and mechanism in changes[change.name]:
            refusal = ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"
        if refusal is not None:
            errors[change.name] = refusal
            continue
        if upsert:
            changes[change.name][mechanism] = scram.credential_from_salted(
                mechanism, change.salted_password, change.salt, change.iterations)
        else:
            changes[change.name][mechanism] = None
            deletions[change.name].append(mechanism)
    try:
        if deletions:
            stored = await ctx.credentials.all()
            for user, mechanisms in deletions.items():
                if user not in errors and any(name not in stored.get(user, {}) for name in mechanisms):
                    errors[user] = (ErrorCode.resource_not_found,
                                    "Attempt to delete a user credential that does not exist")
        failed = await ctx.credentials.alter({user: change for user, change in changes.items() if user not in errors})
        errors.update((user, (ErrorCode.kafka_storage_error, why)) for user, why in failed.items())
    except CredentialStoreError as exc:
        for user in order:
            errors.setdefault(user, (ErrorCode.kafka_storage_error, str(exc)))
    results = tuple(make(m.AlterUserScramCredentialsResult, user=user,
                         error_code=errors[user][0] if user in errors else ErrorCode.none,
                         error_message=errors[user][1] if user in errors else None) for user in order)
    return make(m.AlterUserScramCredentialsResponse, throttle_time=NO_THROTTLE, results=results)
