"""AlterConfigs (33) and IncrementalAlterConfigs (44) for topics.

AlterConfigs replaces a topic's overrides with the given set;
IncrementalAlterConfigs applies SET / DELETE / APPEND / SUBTRACT per key.
Every worker picks the new settings up for its open logs on its next tick.
Broker settings live in server.properties and change with SIGHUP, so a broker
resource is refused with a message saying so.
"""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.config_entries import BROKER, TOPIC
from hpbroker.workers.handlers.guards import config_refusal
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module
from hpbroker.workers.topics import TopicError

ALTER_CONFIGS = 33
INCREMENTAL_ALTER_CONFIGS = 44
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _incremental(current: dict, changes) -> dict:
    result = dict(current)
    for change in changes:
        op = change.config_operation
        if op == SET:
            result[change.name] = change.value
        elif op == DELETE:
            result.pop(change.name, None)
        elif op in (APPEND, SUBTRACT):
            items = [x for x in (result.get(change.name) or "").split(",") if x]
            values = [x for x in (change.value or "").split(",") if x]
            items = (items + [v for v in values if v not in items] if op == APPEND
                     else [x for x in items if x not in values])
            result[change.name] = ",".join(items)
        else:
            raise TopicError(ErrorCode.invalid_request, f"unknown config operation {op} for {change.name}")
    return result


async def _apply(ctx, resource, incremental: bool, validate_only: bool):
    denied = config_refusal(ctx, resource, Operation.ALTER_CONFIGS)
    if denied is not None:
        return denied
    if resource.resource_type == BROKER:
        return ErrorCode.invalid_request, "broker settings come from server.properties: edit it and send SIGHUP"
    if resource.resource_type != TOPIC:
        return ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported"
    info = ctx.topics.get(resource.resource_name)
    if info is None:
        return ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist"
    try:
        if incremental:
            configs = _incremental(info.configs, resource.configs)
        else:
            configs = {c.name: c.value for c in resource.configs if c.value is not None}
        await ctx.topics.set_configs(info.name, configs, validate_only=validate_only)
    except TopicError as exc:
        return exc.code, str(exc)
    return ErrorCode.none, None


def _handler(api_key: int, incremental: bool):
    async def handle(ctx, header, request):
        m = response_module(api_key, header.api_version)
        responses = []
        for resource in request.resources:
            error, message = await _apply(ctx, resource, incremental, request.validate_only)
            responses.append(make(m.AlterConfigsResourceResponse, error_code=error, error_message=message,
                                  resource_type=resource.resource_type, resource_name=resource.resource_name))
        return make(getattr(m, "IncrementalAlterConfigsResponse" if incremental else "AlterConfigsResponse"),
                    throttle_time=NO_THROTTLE, responses=tuple(responses))
    return handle


handle_alter_configs = _handler(ALTER_CONFIGS, incremental=False)
handle_incremental_alter_configs = _handler(INCREMENTAL_ALTER_CONFIGS, incremental=True)
