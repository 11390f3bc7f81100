"""Building kio response objects for whichever version a client asked for.

kio has one set of classes per version, each with only that version's fields;
handlers describe the answer once with every field they know, and ``make``
keeps the ones the version has (the others take their schema defaults).
"""

import dataclasses
import datetime
import importlib
from functools import cache

from hpbroker.protocol.schemas import response_type


@cache
def response_module(api_key: int, version: int):
    """The module holding the response class and its nested entity classes."""
    cls = response_type(api_key, version)
    if cls is None:
        raise KeyError(f"kio has no response schema for api key {api_key} v{version}")
    return importlib.import_module(cls.__module__)


@cache
def _field_names(cls) -> frozenset:
    return frozenset(f.name for f in dataclasses.fields(cls))


def make(cls, **values):
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


NO_THROTTLE = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)


def millis(delta: datetime.timedelta) -> int:
    """A kio duration (an int32/int64 of milliseconds on the wire) as that integer,
    exactly: ``total_seconds() * 1000`` in floating point loses a millisecond
    for many values."""
    return delta // _MS
