"""Which kio dataclass describes each (api_key, version), and which header goes with it.

kio is generated from Apache Kafka 4.x's message specs, so it lacks the versions
Kafka 4 removed (KIP-896). The one we still need is Produce v0-v2, which Kafka 4
keeps advertising because librdkafka < 2.11.1 otherwise sends compressed batches
uncompressed; those versions are mapped onto kio's Produce v3 classes and
converted by ``legacy_produce``.

Header versions come from kio's own metadata (``__header_schema__`` on every
request and response class), so the ApiVersions rule (response header v0 even for
flexible versions) holds because kio's ApiVersionsResponse classes say so.
"""

from __future__ import annotations

from functools import cache
from types import NoneType, UnionType
from typing import Union, get_args, get_origin

from kio.index import KioIndexError, load_request_schema, load_response_schema

PRODUCE = 0
FETCH = 1
API_VERSIONS = 18
CONTROLLED_SHUTDOWN = 7

# Produce v0-v2 are represented by kio's v3 classes (see module docstring).
LEGACY_PRODUCE_MAX = 2
_LEGACY_PRODUCE_BASE = 3


def kio_version(api_key: int, api_version: int) -> int:
    """The kio schema version whose classes represent this wire version."""
    if api_key == PRODUCE and 0 <= api_version <= LEGACY_PRODUCE_MAX:
        return _LEGACY_PRODUCE_BASE
    return api_version


@cache
def request_type(api_key: int, api_version: int) -> type | None:
    """kio request class for a wire version, or None if kio has no schema for it."""
    try:
        return load_request_schema(api_key, kio_version(api_key, api_version))
    except KioIndexError:
        return None


@cache
def response_type(api_key: int, api_version: int) -> type | None:
    """kio response class for a wire version, or None if kio has no schema for it."""
    try:
        return load_response_schema(api_key, kio_version(api_key, api_version))
    except KioIndexError:
        return None


def request_header_version(api_key: int, api_version: int) -> int:
    # ControlledShutdown v0 is the only request that ever used header v0.
    if api_key == CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    if api_key == PRODUCE and api_version <= LEGACY_PRODUCE_MAX:
        return 1
    cls = request_type(api_key, api_version)
    if cls is None:
        raise KeyError(f"no schema for api key {api_key} version {api_version}")
    return int(cls.__header_schema__.__version__)


def response_header_version(api_key: int, api_version: int) -> int:
    if api_key == PRODUCE and api_version <= LEGACY_PRODUCE_MAX:
        return 0
    cls = response_type(api_key, api_version)
    if cls is None:
        raise KeyError(f"no schema for api key {api_key} version {api_version}")
    return int(cls.__header_schema__.__version__)


def is_nullable(field_type) -> bool:
    """Whether a kio field's type allows None (``X | None``): the wire's null."""
    return get_origin(field_type) in (UnionType, Union) and NoneType in get_args(field_type)
