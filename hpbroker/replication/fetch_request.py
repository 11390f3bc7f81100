"""A follower's Fetch request (v15), written straight from what it follows:
the request a follower sends for every batch it copies, where building kio
objects and walking their schema cost about as much as the leader's answer.

Layout (Kafka's FetchRequest.json at v15, flexible; request header v2):

* header: api key, version, correlation id, client id (int16 length), no tags
* max_wait_ms int32, min_bytes int32, max_bytes int32, isolation_level int8,
  session_id int32, session_epoch int32
* topics, compact: topic_id uuid, partitions, compact: partition int32,
  current_leader_epoch int32, fetch_offset int64, last_fetched_epoch int32,
  log_start_offset int64, partition_max_bytes int32, no tags; no tags
* forgotten_topics_data (compact, empty), rack_id (compact string, empty)
* tagged fields: cluster_id (tag 0) left out; replica_state (tag 1):
  replica_id int32, replica_epoch int64, no tags

``tests/test_replica_fetch_request.py`` holds these bytes equal to kio's.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from hpbroker.protocol import client_codec, wire_out
from hpbroker.replication.fetch_response import FetchAnswer, decode_fetch_answer

API_KEY, VERSION = 1, 15
_LIMITS = struct.Struct(">iiibii")  # max wait, min bytes, max bytes, isolation, session id, session epoch
_PARTITION = struct.Struct(">iiqiqi")
_REPLICA_STATE = struct.Struct(">iq")
_REPLICA_STATE_TAG = b"\x01" + bytes((_REPLICA_STATE.size + 1,))  # tag 1, its size (with its own empty tags)

# (partition, current leader epoch, fetch offset, last fetched epoch, log start offset, partition max bytes)
FetchedPartition = tuple[int, int, int, int, int, int]


@dataclass(frozen=True)
class ReplicaFetch:
    """What ``ClientConnection.send`` writes with ``encode`` and reads the
    answer to with ``read_answer`` (``fetch_response.py``)."""

    replica_id: int
    replica_epoch: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topics: Sequence[tuple[uuid.UUID, Sequence[FetchedPartition]]]

    __api_key__ = API_KEY
    __version__ = VERSION

    def encode(self, correlation_id: int, client_id: str | None) -> bytes:
        """The framed request, size prefix included."""
        out = client_codec.request_start(API_KEY, VERSION, correlation_id, client_id)
        out += _LIMITS.pack(self.max_wait_ms, self.min_bytes, self.max_bytes, 0, 0, -1)
        wire_out.array_length(out, len(self.topics), flexible=True)
        for topic_id, partitions in self.topics:
            out += topic_id.bytes
            wire_out.array_length(out, len(partitions), flexible=True)
            for partition in partitions:
                out += _PARTITION.pack(*partition)
                out += wire_out.NO_TAGS
            out += wire_out.NO_TAGS
        wire_out.array_length(out, 0, flexible=True)  # forgotten topics: no fetch sessions
        wire_out.string(out, "", flexible=True)  # rack id
        out += b"\x01" + _REPLICA_STATE_TAG  # one tagged field
        out += _REPLICA_STATE.pack(self.replica_id, self.replica_epoch) + wire_out.NO_TAGS
        return wire_out.framed(out)

    @staticmethod
    def read_answer(frame: memoryview) -> FetchAnswer:
        """The leader's answer, from its frame (size prefix removed)."""
        return decode_fetch_answer(frame)
