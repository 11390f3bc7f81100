"""DeleteGroups (42): an empty group and its offsets go (tombstones in
``__consumer_offsets``); a group with members is NON_EMPTY_GROUP."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.owner_calls import DeleteGroup

API_KEY = 42


async def _denied(group_id: str):
    return DeleteGroup(group_id).unanswered(ErrorCode.group_authorization_failed)


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    answers = await asyncio.gather(*(ctx.owners.ask(DeleteGroup(gid)) if ctx.access.group(Operation.DELETE, gid)
                                     else _denied(gid) for gid in request.groups_names))
    return make(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(m.DeletableGroupResult, group_id=gid, error_code=done.error)
        for gid, done in zip(request.groups_names, answers)))
