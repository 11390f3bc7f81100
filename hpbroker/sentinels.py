"""Kafka's special values, spelled once: the ids and offsets that mean "none",
and the timestamps ListOffsets takes instead of a time.

A leaf module: it imports nothing of hpbroker, so every package may use it.
"""

NO_LEADER = -1  # a partition without a leader (a state znode's leader, Metadata's leader id)
NO_CONTROLLER = -1
UNDEFINED_EPOCH = -1  # no leader epoch known (OffsetForLeaderEpoch, a fetch's last fetched epoch)

# ListOffsets: these timestamps ask for an offset by its place, not its time.
LATEST = -1  # the high watermark (the end a consumer can read to)
EARLIEST = -2  # the log start
MAX_TIMESTAMP = -3  # the record with the largest timestamp (KIP-734)
EARLIEST_LOCAL = -4  # the local log start (= EARLIEST without tiered storage)
LATEST_TIERED = -5  # the last tiered offset (= LATEST without tiered storage)
