"""The leader's answer to a follower's Fetch (v15), read straight from the
frame: the other half of ``fetch_request.py``.

A follower reads one of these for every batch it copies. kio's generic reader
builds an object per field and copies the records out as ``bytes``; this one
walks the layout once and hands back each partition's records as a slice of
the frame (a writable memoryview when the frame is one), so the batches reach
``append_as_follower`` without a copy in user space.

Layout (Kafka's FetchResponse.json at v15, flexible; response header v1):

* header: correlation id int32 (read by the connection), no tags
* throttle_time_ms int32, error_code int16, session_id int32
* responses, compact: topic_id uuid, partitions, compact:
  partition_index int32, error_code int16, high_watermark int64,
  last_stable_offset int64, log_start_offset int64,
  aborted_transactions compact nullable array of (producer_id int64,
  first_offset int64, tags), preferred_read_replica int32,
  records compact nullable bytes; tagged fields: diverging_epoch (tag 0:
  epoch int32, end_offset int64, tags), current_leader (1), snapshot_id (2)
* topic tags; response tags

``tests/test_replica_fetch_response.py`` holds this reader to kio's on the
same bytes. A frame that does not follow the layout raises
``MalformedResponse``.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from hpbroker.errors import ErrorCode
from hpbroker.protocol.exceptions import MalformedRequest
from hpbroker.protocol.header import read_uvarint, skip_tagged_fields
from hpbroker.sentinels import UNDEFINED_EPOCH

_TOP = struct.Struct(">ihi")  # throttle, error, session id
_PARTITION = struct.Struct(">ihqqq")  # index, error, high watermark, last stable offset, log start
_INT32 = struct.Struct(">i")
_DIVERGING = struct.Struct(">iq")  # epoch, end offset
_ABORTED_SIZE = 8 + 8 + 1  # producer id, first offset, empty tags
_DIVERGING_EPOCH_TAG = 0
_WHERE = "fetch response"  # for the tag reader's errors
_ERRORS: dict[int, ErrorCode] = {}  # code -> member: the enum's own lookup costs a microsecond
_TOPIC_IDS: dict[bytes, uuid.UUID] = {}  # the 16 bytes -> the UUID, made once per topic


class MalformedResponse(ValueError):
    """The frame does not hold a Fetch v15 response."""


class PartitionAnswer(NamedTuple):
    partition_index: int
    error_code: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    diverging_epoch: int  # UNDEFINED_EPOCH unless the leader says this follower's log diverges
    diverging_end_offset: int
    records: memoryview | None


class TopicAnswer(NamedTuple):
    topic_id: uuid.UUID
    partitions: list[PartitionAnswer]


class FetchAnswer(NamedTuple):
    error_code: ErrorCode
    responses: list[TopicAnswer]


def _count(frame: memoryview, pos: int, what: str) -> tuple[int, int]:
    """A compact array's length; -1 for null."""
    n, pos = read_uvarint(frame, pos)
    if n - 1 > len(frame) - pos:  # every element takes at least a byte
        raise MalformedResponse(f"{what}: {n - 1} elements in {len(frame) - pos} bytes")
    return n - 1, pos


def _error(code: int) -> ErrorCode:
    found = _ERRORS.get(code)
    if found is None:
        found = _ERRORS[code] = ErrorCode(code)  # ValueError for a code Kafka does not define
    return found


def _topic_id(raw: bytes) -> uuid.UUID:
    found = _TOPIC_IDS.get(raw)
    if found is None:
        if len(_TOPIC_IDS) >= 4096:  # a few topics are followed; bound what a confused leader could fill
            _TOPIC_IDS.clear()
        found = _TOPIC_IDS[raw] = uuid.UUID(bytes=raw)
    return found


def decode_fetch_answer(frame: memoryview) -> FetchAnswer:
    """The response in ``frame`` (without its size prefix; the connection has
    matched its correlation id already)."""
    try:
        return _decode(frame, skip_tagged_fields(frame, _INT32.size, _WHERE))
    except (struct.error, IndexError) as exc:
        raise MalformedResponse(f"fetch response cut off: {exc}") from None
    except (MalformedRequest, ValueError) as exc:
        # the shared varint and tag readers raise MalformedRequest; a ValueError is an
        # error code Kafka does not define or a topic id cut short
        raise MalformedResponse(str(exc)) from None


def _decode(frame: memoryview, pos: int) -> FetchAnswer:
    """The walk, with the one-byte lengths and empty tag sections a follower
    nearly always gets taken inline (this runs for every batch copied)."""
    end = len(frame)
    _throttle, error, _session = _TOP.unpack_from(frame, pos)
    pos += _TOP.size
    n_topics, pos = _count(frame, pos, "responses")
    topics = []
    for _ in range(n_topics):
        topic_id = _topic_id(bytes(frame[pos:pos + 16]))
        pos += 16
        n_partitions, pos = _count(frame, pos, "partitions")
        partitions = []
        for _ in range(n_partitions):
            index, p_error, high_watermark, last_stable, log_start = _PARTITION.unpack_from(frame, pos)
            pos += _PARTITION.size
            if frame[pos] == 0:  # aborted transactions: null, as a leader answers a follower
                pos += 1
            else:
                n_aborted, pos = _count(frame, pos, "aborted_transactions")
                for _ in range(n_aborted):  # not kept: a follower copies batches as they are
                    pos = skip_tagged_fields(frame, pos + _ABORTED_SIZE - 1, _WHERE)
            pos += _INT32.size  # preferred read replica
            size = frame[pos]
            if size < 0x80:
                pos += 1
            else:
                size, pos = read_uvarint(frame, pos)
            records = None
            if size:
                stop = pos + size - 1
                if stop > end:
                    raise MalformedResponse(f"records of {size - 1} bytes run past the end")
                records, pos = frame[pos:stop], stop
            diverging_epoch, diverging_end = UNDEFINED_EPOCH, -1
            if frame[pos] == 0:
                pos += 1
            else:
                n_tags, pos = read_uvarint(frame, pos)
                for _ in range(n_tags):
                    tag, pos = read_uvarint(frame, pos)
                    tag_size, pos = read_uvarint(frame, pos)
                    if tag == _DIVERGING_EPOCH_TAG:
                        diverging_epoch, diverging_end = _DIVERGING.unpack_from(frame, pos)
                    pos += tag_size
                if pos > end:
                    raise MalformedResponse("a tagged field runs past the end")
            partitions.append(PartitionAnswer(index, _error(p_error), high_watermark, last_stable, log_start,
                                              diverging_epoch, diverging_end, records))
        pos = skip_tagged_fields(frame, pos, _WHERE)
        topics.append(TopicAnswer(topic_id, partitions))
    skip_tagged_fields(frame, pos, _WHERE)
    return FetchAnswer(_error(error), topics)
