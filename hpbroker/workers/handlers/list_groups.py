"""ListGroups (16): every worker coordinates some groups, so all are asked and
the lists merged.  v4 filters by state, v5 by type (all groups here are
"classic")."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.peers import PeerUnavailable

API_KEY = 16


async def _ask(ctx, worker, states, types):
    try:
        return await ctx.call_worker(worker, "groups.list_groups", states, types)
    except PeerUnavailable:
        return ErrorCode.coordinator_not_available, []


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    states = list(getattr(request, "states_filter", ()) or ())
    types = list(getattr(request, "types_filter", ()) or ())
    answers = await asyncio.gather(*(_ask(ctx, w, states, types) for w in range(ctx.workers)))
    error = next((e for e, _ in answers if e), ErrorCode.none)  # the first failure, as a partial list is still returned
    rows = sorted(row for _, found in answers for row in found)
    return make(m.ListGroupsResponse, throttle_time=NO_THROTTLE, error_code=error, groups=tuple(
        make(m.ListedGroup, group_id=gid, protocol_type=ptype, group_state=state, group_type=gtype)
        for gid, ptype, state, gtype in rows))
