"""The rows a read yields: the columns of Spark's own Kafka source, in its order.

    key            binary      null for a null key
    value          binary      null for a null value (a tombstone)
    topic          string
    partition      int
    offset         long
    timestamp      timestamp   the record's timestamp, or the batch's
                               LogAppendTime when the batch says so
    timestampType  int         0 = CreateTime, 1 = LogAppendTime
    headers        array<struct<key:string, value:binary>>
                               null when the record has no headers, as
                               Spark's Kafka source gives them

``ARROW_SCHEMA`` is what Spark expects back from ``read()`` for this schema
(Spark compares it with ``Schema.equals``): every field nullable, timestamps in
microseconds with time zone UTC.  ``tests/spark/test_schema.py`` pins the two
against each other.
"""

import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])

SPARK_SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField("headers", ArrayType(HEADER_TYPE)),
])

ARROW_HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_HEADERS_TYPE = pa.list_(pa.field("element", ARROW_HEADER_TYPE))
ARROW_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

ARROW_SCHEMA = pa.schema([
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", ARROW_TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
    pa.field("headers", ARROW_HEADERS_TYPE),
])
