"""DescribeAcls (29): the ACLs a filter matches, grouped by resource pattern.
Needs DESCRIBE on the cluster; with no authorizer, SECURITY_DISABLED."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acl_store import AclStoreError
from hpbroker.security.acls import AclError, Binding
from hpbroker.workers.handlers.acl_common import filter_of, refusal, store_error, wire
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 29


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)

    def answer(error=ErrorCode.none, message=None, resources=()):
        return make(m.DescribeAclsResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                    resources=resources)
    refused = refusal(ctx)
    if refused is not None:
        return answer(*refused)
    try:
        wanted = filter_of(request)
        acls = ctx.acls.read()
    except AclError as exc:
        return answer(ErrorCode.invalid_request, str(exc))
    except AclStoreError as exc:
        return answer(store_error(exc), str(exc))
    resources = []
    for resource, entries in sorted(acls.items()):
        found = sorted(e for e in entries if wanted.matches(Binding(resource, e)))
        if found:
            resources.append(make(
                m.DescribeAclsResource, resource_type=wire(resource.kind), resource_name=resource.name,
                pattern_type=wire(resource.pattern),
                acls=tuple(make(m.AclDescription, principal=e.principal, host=e.host, operation=wire(e.operation),
                                permission_type=wire(e.permission)) for e in found)))
    return answer(resources=tuple(resources))
