"""Mutated Kafka requests, and a driver that decodes them.

Seeds are real clients' requests (tests/golden/requests.jsonl) and a sample of
every advertised api key and version (harness/request_samples.py).  Each seed is
mutated at every byte: length-shaped values written over it (0, -1, 2^31 - 1,
-2^31 as int32 and int16, five-byte varints), single bytes set to 0x00/0xff,
every truncation, and seeded random corruption.

``python -m tests.fuzz_requests --seconds N`` decodes mutations until N seconds
are up and prints one summary line; it exits non-zero if decoding raised
anything but the protocol layer's own errors.  A native abort kills the
process instead: the last "seed" line it printed names the culprit.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import struct
import sys
import time
from collections.abc import Iterator
from pathlib import Path

CAPTURED = Path(__file__).parent / "golden" / "requests.jsonl"

_LENGTHS_32 = [struct.pack(">i", v) for v in (0, -1, 0x7FFFFFFF, -0x80000000, 0x01000000)]
_LENGTHS_16 = [struct.pack(">h", v) for v in (0, -1, 0x7FFF, -0x8000)]
_VARINTS = [b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x08", b"\xff\xff\xff\x7f", b"\x00"]
HEADER_PREFIX = 8  # api key, version, correlation id: mutating these only picks another schema


def captured_frames() -> list[tuple[str, bytes]]:
    """(client, frame) of each request captured from a real client."""
    if not CAPTURED.exists():
        return []
    out = []
    for line in CAPTURED.read_text().splitlines():
        entry = json.loads(line)
        out.append((entry["client"], base64.b64decode(entry["frame"])))
    return out


def seeds() -> list[tuple[str, bytes]]:
    from harness.request_samples import all_samples

    found = [(f"sample {key} v{version}", frame) for (key, version), frame in all_samples().items()]
    return found + [(f"{client} {frame[:2].hex()}", frame) for client, frame in captured_frames()]


def mutations(frame: bytes, rng: random.Random, randoms: int = 64) -> Iterator[bytes]:
    for n in range(len(frame)):
        yield frame[:n]
    for i in range(HEADER_PREFIX, len(frame)):
        for value in _LENGTHS_32:
            yield frame[:i] + value + frame[i + 4:]
        for value in _LENGTHS_16:
            yield frame[:i] + value + frame[i + 2:]
        for value in _VARINTS:
            yield frame[:i] + value + frame[i + 1:]
        yield frame[:i] + b"\xff" + frame[i + 1:]
    for _ in range(randoms):
        data = bytearray(frame)
        for _ in range(rng.randint(1, 8)):
            if len(data) > HEADER_PREFIX:
                data[rng.randrange(HEADER_PREFIX, len(data))] = rng.randrange(256)
        if rng.random() < 0.2:
            data += rng.randbytes(rng.randint(1, 16))
        yield bytes(data)


def run(seconds: float, seed: int = 0) -> int:
    from hpbroker.protocol import ProtocolError, decode_request

    rng = random.Random(seed)
    deadline = time.monotonic() + seconds
    decoded = rejected = 0
    failures = []
    all_seeds = seeds()
    done = 0
    for name, frame in all_seeds:
        print(f"seed {name}", flush=True)
        for mutant in mutations(frame, rng):
            try:
                decode_request(mutant)
                decoded += 1
            except ProtocolError:
                rejected += 1
            except Exception as exc:  # anything else would reach a handler's error path
                failures.append(f"{name}: {type(exc).__name__}: {exc} ({mutant.hex()})")
        done += 1
        if time.monotonic() >= deadline:
            break
    print(f"fuzzed {decoded + rejected} mutants of {done}/{len(all_seeds)} seeds: "
          f"{decoded} decoded, {rejected} rejected, {len(failures)} failures", flush=True)
    for failure in failures[:20]:
        print("FAILURE", failure[:400])
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    sys.exit(run(args.seconds, args.seed))


if __name__ == "__main__":
    main()
