"""What the group handlers share: forwarding a group operation to the worker
that coordinates the group (the owner of its ``__consumer_offsets`` partition)."""

import datetime

from hpbroker.server.ownership import group_owner
from hpbroker.workers.peers import PeerUnavailable


def coordinator_of(ctx, group_id: str) -> int:
    return group_owner(group_id or "", ctx.workers, ctx.config["offsets.topic.num.partitions"])


async def call_group(ctx, group_id: str, method: str, *args):
    """``GroupCoordinator.method(group_id, *args)`` on the owner; None when the owner is
    restarting (answered COORDINATOR_NOT_AVAILABLE: the client looks it up again)."""
    try:
        return await ctx.call_worker(coordinator_of(ctx, group_id), "groups." + method, group_id, *args)
    except PeerUnavailable:
        return None


def to_ms(value) -> int:
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)
