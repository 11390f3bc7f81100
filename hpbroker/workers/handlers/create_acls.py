"""CreateAcls (30): add ACLs.  Needs ALTER on the cluster; a creation Kafka
would refuse (an unknown or ANY type, an operation its resource does not
have, a principal not of the form Type:name) is answered INVALID_REQUEST on
its own and the others are added."""

import logging

from hpbroker.errors import ErrorCode
from hpbroker.security.acl_store import AclStoreError
from hpbroker.security.acls import AclError, validated
from hpbroker.workers.authorization import principal
from hpbroker.workers.handlers.acl_common import binding_of, refusal, store_error
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 30
log = logging.getLogger(__name__)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    refused = refusal(ctx)
    outcomes: list[tuple[ErrorCode, str | None]] = [(ErrorCode.none, None)] * len(request.creations)
    valid = []
    if refused is not None:
        outcomes = [refused] * len(request.creations)
    else:
        for i, creation in enumerate(request.creations):
            try:
                binding = validated(binding_of(creation))
                if not ctx.cluster.standalone and "/" in binding.resource.name:
                    raise AclError("a resource name with '/' cannot be kept in ZooKeeper")
                valid.append((i, binding))
            except AclError as exc:
                outcomes[i] = (ErrorCode.invalid_request, str(exc))
    if valid:
        try:
            await ctx.acls.add([binding for _, binding in valid])
            for _, binding in valid:
                log.info("%s added ACL: %s %s %s on %s from host %s", principal(), binding.entry.principal,
                         binding.entry.permission.name, binding.entry.operation.name, binding.resource,
                         binding.entry.host)
        except AclStoreError as exc:
            log.warning("ACLs not added: %s", exc)
            for i, _ in valid:
                outcomes[i] = (store_error(exc), str(exc))
    return make(m.CreateAclsResponse, throttle_time=NO_THROTTLE,
                results=tuple(make(m.AclCreationResult, error_code=e, error_message=msg) for e, msg in outcomes))
