"""Points in time on the command line: ISO 8601 or milliseconds since the epoch."""

from datetime import datetime

from hpbroker.cli.connection import CliError


def parse_time_ms(text: str) -> int:
    """``1700000000000`` or ``2024-05-01T12:00:00[.sss][Z|+02:00]`` -> epoch ms.
    An ISO time without a zone is local time, as in kafka-consumer-groups."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise CliError(f"bad time {text!r}: want ISO 8601 (2024-05-01T12:00:00Z) or epoch milliseconds") from None
    return int(moment.timestamp() * 1000)

