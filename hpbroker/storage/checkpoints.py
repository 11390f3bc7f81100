"""Kafka's text checkpoint files, and the small property files beside them.

Checkpoint format (recovery-point-offset-checkpoint, log-start-offset-checkpoint,
replication-offset-checkpoint, cleaner-offset-checkpoint, leader-epoch-checkpoint)::

    0                 <- version
    2                 <- number of entries
    events 0 1234     <- "topic partition offset" (leader epochs: "epoch startOffset",
    events 1 99          read and written by ``leader_epochs.py``)

Every file here is replaced atomically: written to ``<name>.tmp``, fsynced,
renamed over the old one, and the directory fsynced, so a crash leaves either
the old or the new content, never a torn file.
"""

import base64
import json
import os
import uuid

CHECKPOINT_VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint or property file is malformed."""


def write_atomically(path: str, text: str) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        left = memoryview(text.encode())
        while left:  # a nearly full disk writes part and returns: the rest raises, so no cut file replaces a whole one
            left = left[os.write(fd, left):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


def fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_rows(path: str, width: int) -> list[list[str]]:
    """The entry lines of a checkpoint, each split into ``width`` fields; a
    missing file has none.  Raises CheckpointError for a malformed one."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return []
    if len(lines) < 2:
        raise CheckpointError(f"{path}: expected a version and a count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CheckpointError(f"{path}: unsupported checkpoint version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad entry count {lines[1]!r}") from None
    rows = [line.split() for line in lines[2:] if line.strip()]
    if len(rows) != count or any(len(row) != width for row in rows):
        raise CheckpointError(f"{path}: expected {count} entries of {width} fields")
    return rows


def write_rows(path: str, rows: list) -> None:
    """Replace a checkpoint atomically with the version, count and ``rows``."""
    body = "".join(" ".join(str(field) for field in row) + "\n" for row in rows)
    write_atomically(path, f"{CHECKPOINT_VERSION}\n{len(rows)}\n{body}")


def read_offset_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}``; a missing file is empty."""
    try:
        return {(t, int(p)): int(o) for t, p, o in read_rows(path, 3)}
    except ValueError as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"{path}: {exc}") from None


def write_offset_checkpoint(path: str, offsets: dict[tuple[str, int], int]) -> None:
    write_rows(path, [(t, p, o) for (t, p), o in sorted(offsets.items())])


# --- property files ---------------------------------------------------------


def read_properties(path: str) -> dict[str, str]:
    """Java-style ``key=value`` (or ``key: value``) lines; '#' and '!' start comments."""
    props = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line or line[0] in "#!":
                continue
            sep = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
            if sep < 0:
                raise CheckpointError(f"{path}: not a key=value line: {line!r}")
            props[line[:sep].strip()] = line[sep + 1 :].strip()
    return props


def write_properties(path: str, props: dict[str, str], comment: str = "") -> None:
    header = f"#{comment}\n" if comment else ""
    write_atomically(path, header + "".join(f"{k}={v}\n" for k, v in props.items()))


def kafka_uuid_string(value: uuid.UUID) -> str:
    """Kafka prints a Uuid as URL-safe base64 of its 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode()


def parse_kafka_uuid(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except ValueError:
        raise CheckpointError(f"not a Kafka UUID: {text!r}") from None


def new_kafka_uuid() -> uuid.UUID:
    """A random id that Kafka would accept (it reserves the all-zero and all-ones-high ids)."""
    while True:
        value = uuid.uuid4()
        if kafka_uuid_string(value)[0] != "-" and value.int != 0:
            return value


def write_partition_metadata(path: str, topic_id: uuid.UUID) -> None:
    write_atomically(path, f"version: 0\ntopic_id: {kafka_uuid_string(topic_id)}\n")


def read_partition_metadata(path: str) -> uuid.UUID:
    props = read_properties(path)
    if props.get("version") != "0" or "topic_id" not in props:
        raise CheckpointError(f"{path}: expected 'version: 0' and 'topic_id: ...'")
    return parse_kafka_uuid(props["topic_id"])


def write_clean_shutdown(path: str, broker_epoch: int = -1) -> None:
    write_atomically(path, json.dumps({"version": 0, "broker_epoch": broker_epoch}))
