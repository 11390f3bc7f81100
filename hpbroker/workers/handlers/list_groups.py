"""ListGroups (16): every worker coordinates some groups, so all are asked and
the lists merged.  v4 filters by state, v5 by type (all groups here are
"classic")."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import CLUSTER_NAME, Operation, ResourceType
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import ListGroups

API_KEY = 16


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    call = ListGroups(list(getattr(request, "states_filter", ()) or ()),
                      list(getattr(request, "types_filter", ()) or ()))
    answers = await asyncio.gather(*(ctx.owners.ask(call, worker) for worker in range(ctx.workers)))
    # the first failure, as a partial list is still returned
    error = next((a.error for a in answers if a.error != ErrorCode.none), ErrorCode.none)
    rows = sorted((g.group_id, g.protocol_type, g.state, g.group_type) for a in answers for g in a.groups)
    # without DESCRIBE on the cluster, only the groups the client may describe (never an error)
    if ctx.access.enabled and not ctx.access.allowed(Operation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME,
                                                     quiet=True):
        rows = [row for row in rows if ctx.access.allowed(Operation.DESCRIBE, ResourceType.GROUP, row[0], quiet=True)]
    return make(m.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error, groups=tuple(
        make(m.ListedGroup, group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype)
        for gid, ptype, state, gtype in rows))
