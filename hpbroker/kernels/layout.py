"""Byte layouts of Kafka's log entries, declared once for the kernels and the codec.

Everything is big-endian.  Each offset is chained from the previous field so a
wrong size cannot hide; ``tests/test_layout.py`` pins the totals.

Record batch v2 (magic 2)::

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field (total size - 12)
    12 partitionLeaderEpoch  int32   outside the CRC: a leader can stamp it freely
    16 magic                 int8    = 2
    17 crc                   uint32  CRC-32C of bytes [21, end)
    21 attributes            int16
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordCount           int32
    61 records...

Legacy message, magic 0 and 1 (one "message" of a message set)::

    0  offset      int64   absolute; for a compressed wrapper: the last inner offset
    8  messageSize int32   bytes after this field
    12 crc         uint32  CRC-32 (IEEE) of bytes [16, end)
    16 magic       int8
    17 attributes  int8
    18 timestamp   int64   magic 1 only
    ..  key bytes (int32 length, -1 = null), value bytes (likewise)

The first 17 bytes (offset, size, 4 bytes, magic) sit at the same places in both
formats, which is how a reader tells them apart.
"""

# --- record batch v2 header -------------------------------------------------
BASE_OFFSET = 0
BATCH_LENGTH = BASE_OFFSET + 8
PARTITION_LEADER_EPOCH = BATCH_LENGTH + 4
MAGIC = PARTITION_LEADER_EPOCH + 4
CRC = MAGIC + 1
ATTRIBUTES = CRC + 4
ATTRIBUTES_LOW = ATTRIBUTES + 1  # a big-endian int16: every flag and the codec sit in its low byte
LAST_OFFSET_DELTA = ATTRIBUTES + 2
BASE_TIMESTAMP = LAST_OFFSET_DELTA + 4
MAX_TIMESTAMP = BASE_TIMESTAMP + 8
PRODUCER_ID = MAX_TIMESTAMP + 8
PRODUCER_EPOCH = PRODUCER_ID + 8
BASE_SEQUENCE = PRODUCER_EPOCH + 2
RECORD_COUNT = BASE_SEQUENCE + 4
RECORDS = RECORD_COUNT + 4
BATCH_HEADER_SIZE = RECORDS  # 61

# Offset + length prefix that every log entry starts with (Kafka's LOG_OVERHEAD).
LOG_OVERHEAD = BATCH_LENGTH + 4  # 12
# Bytes needed to read magic, whatever the format.
MAGIC_PROBE_SIZE = MAGIC + 1  # 17
# The CRC of a v2 batch covers everything from the attributes to the end.
CRC_START = ATTRIBUTES

# --- record batch v2 attributes ---------------------------------------------
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08  # 0 = CreateTime, 1 = LogAppendTime
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40  # baseTimestamp holds the delete horizon (KIP-534)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1

# --- legacy messages (magic 0 / 1) ------------------------------------------
LEGACY_CRC = LOG_OVERHEAD  # 12
LEGACY_MAGIC = LEGACY_CRC + 4  # 16
LEGACY_ATTRIBUTES = LEGACY_MAGIC + 1  # 17
LEGACY_TIMESTAMP = LEGACY_ATTRIBUTES + 1  # 18, magic 1 only
LEGACY_V0_KEY = LEGACY_TIMESTAMP  # 18
LEGACY_V1_KEY = LEGACY_TIMESTAMP + 8  # 26
LEGACY_CRC_START = LEGACY_MAGIC
LEGACY_COMPRESSION_MASK = 0x07
LEGACY_TIMESTAMP_TYPE_BIT = 0x08  # magic 1 only
# Smallest complete message: header, key length, value length.
LEGACY_V0_MIN_SIZE = LEGACY_V0_KEY + 4 + 4  # 26
LEGACY_V1_MIN_SIZE = LEGACY_V1_KEY + 4 + 4  # 34

# --- compression codec ids (attributes & COMPRESSION_MASK) -------------------
CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")

# --- control records (key of a record in a control batch) --------------------
# key: version int16 (0), type int16: 0 = abort, 1 = commit
CONTROL_TYPE_ABORT = 0
CONTROL_TYPE_COMMIT = 1
