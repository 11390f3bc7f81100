"""DeleteAcls (31): remove the ACLs each filter matches, and say which.
Needs ALTER on the cluster; an invalid filter is answered INVALID_REQUEST
on its own."""

import logging

from hpbroker.errors import ErrorCode
from hpbroker.security.acl_store import AclStoreError
from hpbroker.security.acls import AclError
from hpbroker.workers.authorization import principal
from hpbroker.workers.handlers.acl_common import filter_of, refusal, store_error, wire
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 31
log = logging.getLogger(__name__)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    refused = refusal(ctx)
    outcomes: list[tuple[ErrorCode, str | None, list]] = [(ErrorCode.none, None, [])] * len(request.filters)
    valid = []
    if refused is not None:
        outcomes = [(*refused, [])] * len(request.filters)
    else:
        for i, wanted in enumerate(request.filters):
            try:
                valid.append((i, filter_of(wanted)))
            except AclError as exc:
                outcomes[i] = (ErrorCode.invalid_request, str(exc), [])
    if valid:
        try:
            matched = await ctx.acls.remove([f for _, f in valid])
            for (i, _), bindings in zip(valid, matched):
                outcomes[i] = (ErrorCode.none, None, bindings)
                for b in bindings:
                    log.info("%s removed ACL: %s %s %s on %s from host %s", principal(), b.entry.principal,
                             b.entry.permission.name, b.entry.operation.name, b.resource, b.entry.host)
        except AclStoreError as exc:
            log.warning("ACLs not removed: %s", exc)
            for i, _ in valid:
                outcomes[i] = (store_error(exc), str(exc), [])
    results = tuple(make(
        m.DeleteAclsFilterResult, error_code=error, error_message=message,
        matching_acls=tuple(make(m.DeleteAclsMatchingAcl, error_code=ErrorCode.none, error_message=None,
                                 resource_type=wire(b.resource.kind), resource_name=b.resource.name,
                                 pattern_type=wire(b.resource.pattern), principal=b.entry.principal,
                                 host=b.entry.host, operation=wire(b.entry.operation),
                                 permission_type=wire(b.entry.permission)) for b in bindings))
        for error, message, bindings in outcomes)
    return make(m.DeleteAclsResponse, throttle_time=NO_THROTTLE, filter_results=results)
