"""DescribeConfigs (32): a topic's effective settings (with where each comes
from) or the broker's."""

from hpbroker.errors import ErrorCode
from hpbroker.security.acls import Operation
from hpbroker.workers.handlers.config_entries import BROKER, TOPIC, broker_config_entries, topic_config_entries
from hpbroker.workers.handlers.guards import config_refusal
from hpbroker.workers.kio_build import NO_THROTTLE, make, response_module

API_KEY = 32


def _entries(ctx, resource):
    denied = config_refusal(ctx, resource, Operation.DESCRIBE_CONFIGS)
    if denied is not None:
        return *denied, []
    if resource.resource_type == TOPIC:
        info = ctx.topics.get(resource.resource_name)
        if info is None:
            return ErrorCode.unknown_topic_or_partition, f"topic {resource.resource_name!r} does not exist", []
        return ErrorCode.none, None, list(topic_config_entries(ctx, info.name, info.configs))
    if resource.resource_type == BROKER:
        if resource.resource_name not in ("", str(ctx.identity.broker_id)):
            return ErrorCode.invalid_request, f"this is broker {ctx.identity.broker_id}", []
        return ErrorCode.none, None, list(broker_config_entries(ctx))
    return ErrorCode.invalid_request, f"resource type {resource.resource_type} is not supported", []


async def handle(ctx, header, request):
    m = response_module(API_KEY, header.api_version)
    results = []
    for resource in request.resources:
        error, message, entries = _entries(ctx, resource)
        keys = resource.configuration_keys
        if keys is not None:
            entries = [e for e in entries if e[0] in set(keys)]
        configs = tuple(make(m.DescribeConfigsResourceResult, name=name, value=value,
                             read_only=resource.resource_type == BROKER, config_source=source, is_sensitive=False,
                             synonyms=(), config_type=kind, documentation=None)
                        for name, value, source, kind in entries)
        results.append(make(m.DescribeConfigsResult, error_code=error, error_message=message,
                            resource_type=resource.resource_type, resource_name=resource.resource_name,
                            configs=configs))
    return make(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))
