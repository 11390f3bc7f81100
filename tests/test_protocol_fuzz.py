"""No byte sequence may crash the decoder: every mutant of every seed request
is either decoded or rejected with the protocol layer's own error.

The mutants are decoded in a child process, because the failure this guards
against (a native allocation of a declared length) aborts the process rather
than raising."""

import struct
import subprocess
import sys

import pytest
from kio.schema.metadata.v1.request import MetadataRequest

from harness.request_samples import all_samples, sample_body, sample_frame
from hpbroker.protocol import MalformedRequest, decode_request
from hpbroker.protocol.bounds import check_body
from hpbroker.protocol.schemas import request_type


def test_every_mutant_decodes_or_is_rejected():
    done = subprocess.run([sys.executable, "-m", "tests.fuzz_requests", "--seconds", "40"], capture_output=True,
                          text=True, timeout=300)
    summary = [line for line in done.stdout.splitlines() if line.startswith("fuzzed")]
    assert done.returncode == 0, \
        f"fuzzing failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert summary and " 0 failures" in summary[0], done.stdout[-3000:]
    # every seed was reached within the time given
    seeds, total = summary[0].split(" of ")[1].split(" seeds")[0].split("/")
    assert seeds == total, summary[0]


def test_a_31_byte_metadata_request_declaring_a_huge_array_is_malformed():
    # Metadata v12 (flexible): header v2, then a compact array whose count is a
    # five-byte varint (2^32 - 1 entries) in a frame of 31 bytes.
    frame = struct.pack(">hhih", 3, 12, 1, 4) + b"fuzz" + b"\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00" * 11
    assert len(frame) == 31
    with pytest.raises(MalformedRequest, match="longer than"):
        decode_request(frame)


# Where the sample body's first array count sits: ListOffsets v7 after
# replica_id (4) and isolation_level (1); OffsetCommit v9 after group_id "t"
# (compact: 2 bytes), generation_id (4), member_id "t" (2), group_instance_id
# "t" (2); Produce v9 after transactional_id "t" (2), acks (2), timeout (4).
@pytest.mark.parametrize("api_key,version,at", [(2, 7, 5), (8, 9, 10), (0, 9, 8)])
def test_null_for_a_non_nullable_array_is_malformed(api_key, version, at):
    """ListOffsets topics, OffsetCommit topics, Produce topic_data: a null
    count where the schema allows none used to reach the handler as None."""
    frame = sample_frame(api_key, version)
    body = bytearray(sample_body(api_key, version))
    header = frame[:len(frame) - len(body)]
    assert body[at] == 3  # compact count of the sample's two entries
    body[at] = 0  # compact count 0: null
    with pytest.raises(MalformedRequest, match="not allowed"):
        decode_request(header + bytes(body))


def test_nullable_array_may_be_null():
    # Metadata v1+: topics null means "all topics"
    frame = struct.pack(">hhih", 3, 1, 1, 4) + b"fuzz" + struct.pack(">i", -1)
    _, request = decode_request(frame)
    assert isinstance(request, MetadataRequest)
    assert request.topics is None


def test_check_body_passes_every_sample():
    from hpbroker.protocol.header import parse_request_header
    from hpbroker.protocol.schemas import request_header_version

    for (key, version), frame in all_samples().items():
        if key == 0 and version <= 2:
            continue  # legacy produce is checked after its conversion to v3
        _, offset = parse_request_header(frame, request_header_version(key, version))
        schema = request_type(key, version)
        assert schema is not None
        assert check_body(schema, frame, offset) == []
