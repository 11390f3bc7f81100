"""The hand-written Fetch response against kio's decoder, every version we serve."""

import os
import uuid

import pytest
from kio.serial import entity_reader

from hpbroker.protocol import SUPPORTED_VERSIONS
from hpbroker.protocol.schemas import response_type
from hpbroker.records import Record, encode_batch
from hpbroker.workers.fetch_response import FileRegion, PartitionResult, TopicResult, encode_fetch_response

FETCH = 1
VERSIONS = range(SUPPORTED_VERSIONS[FETCH][0], SUPPORTED_VERSIONS[FETCH][1] + 1)


def _flatten(pieces) -> bytes:
    out = bytearray()
    for piece in pieces:
        if isinstance(piece, FileRegion):
            out += os.pread(piece.fd, piece.size, piece.position)
        else:
            out += piece
    return bytes(out)


@pytest.mark.parametrize("version", VERSIONS)
def test_kio_reads_what_we_write(tmp_path, version):
    batch = encode_batch([Record(0, 1, b"k", b"v")])
    path = tmp_path / "seg.log"
    path.write_bytes(b"junk" + batch + b"more")
    fd = os.open(path, os.O_RDONLY)
    topic_id = uuid.uuid4()
    topics = [TopicResult("events", topic_id, [
        PartitionResult(0, 0, 10, 10, 0, aborted=None, records=FileRegion(fd, 4, len(batch))),
        PartitionResult(1, 1, 5, 5, 2, aborted=[(7, 3)], records=b""),
        PartitionResult(2, 0, 1, 1, 0, records=batch),
    ])]
    frame = _flatten(encode_fetch_response(version, 42, topics))
    os.close(fd)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    assert int.from_bytes(frame[4:8], "big") == 42
    body = 9 if version >= 12 else 8  # flexible versions carry a tagged-field byte in the header
    schema = response_type(FETCH, version)
    assert schema is not None
    response, _ = entity_reader(schema)(frame, body)
    [topic] = response.responses
    assert (topic.topic_id == topic_id) if version >= 13 else (topic.topic == "events")
    first, second, third = topic.partitions
    assert bytes(first.records) == batch and first.high_watermark == 10
    assert second.error_code.value == 1 and bytes(second.records) == b""
    assert second.aborted_transactions[0].producer_id == 7
    assert getattr(second, "log_start_offset", 2) == 2  # v5+
    assert bytes(third.records) == batch
