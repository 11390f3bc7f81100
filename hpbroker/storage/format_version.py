"""``message.format.version`` / ``log.message.format.version``: accepted, ignored.

Kafka 3.x deprecated the setting: with an inter-broker protocol of 3.0 or
later (the only one a standalone broker has) every log is written in record
batch v2 and the value is ignored, but it is still validated and shown.  The
valid values are Kafka's release versions, as MetadataVersion.fromVersionString
reads them: ``0.10.2``, ``2.8``, ``3.0-IV1``; anything after the release's
segments is ignored (``2.8.1`` is ``2.8``), and a bare release means its
latest internal version.
"""

DEFAULT = "3.0-IV1"  # Kafka 3.x's default

# Each release and how many internal versions (IV0, IV1, ...) it had; 0 means
# the release predates them and is spelled without a suffix.
_RELEASES = {
    "0.8.0": 0, "0.8.1": 0, "0.8.2": 0, "0.9.0": 0,
    "0.10.0": 2, "0.10.1": 3, "0.10.2": 1, "0.11.0": 3,
    "1.0": 1, "1.1": 1,
    "2.0": 2, "2.1": 3, "2.2": 2, "2.3": 2, "2.4": 2, "2.5": 1, "2.6": 1, "2.7": 3, "2.8": 2,
    "3.0": 2, "3.1": 1, "3.2": 1, "3.3": 4, "3.4": 1, "3.5": 3, "3.6": 3, "3.7": 5, "3.8": 1, "3.9": 1,
}
VALID = frozenset(_RELEASES) | frozenset(f"{r}-IV{i}" for r, n in _RELEASES.items() for i in range(n))


def parse(text) -> str:
    """The value as given (Kafka shows it unchanged), once it names a version."""
    value = str(text).strip()
    segments = value.split(".")
    wanted = 3 if value.startswith("0.") else 2
    key = value if len(segments) <= wanted else ".".join(segments[:wanted])
    if key not in VALID:
        raise ValueError(f"Version {value} is not a valid version")
    return value
