"""What the transaction APIs' handlers share: which error an older client
understands, and whether this broker coordinates transactions at all."""

from hpbroker.errors import ErrorCode

# Before KIP-588 clients knew no PRODUCER_FENCED: each API's first version that may carry it
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2, 28: 2}


def for_version(error: ErrorCode, api_key: int, version: int) -> ErrorCode:
    """``error`` as a client of ``version`` understands it: an older one is told
    INVALID_PRODUCER_EPOCH where a newer one is told PRODUCER_FENCED."""
    if error == ErrorCode.producer_fenced and version < _FENCED_SINCE.get(api_key, 0):
        return ErrorCode.invalid_producer_epoch
    return error
