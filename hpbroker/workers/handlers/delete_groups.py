"""DeleteGroups (42): an empty group and its offsets go (tombstones in
``__consumer_offsets``); a group with members is NON_EMPTY_GROUP."""

import asyncio

from hpbroker.errors import ErrorCode
from hpbroker.workers.handlers.group_calls import call_group
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 42


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    errors = await asyncio.gather(*(call_group(ctx, gid, "delete_group") for gid in request.groups_names))
    return make(m.DeleteGroupsResponse, throttle_time=NO_THROTTLE, results=tuple(
        make(m.DeletableGroupResult, group_id=gid,
             error_code=ErrorCode.coordinator_not_available if error is None else error)
        for gid, error in zip(request.groups_names, errors)))
