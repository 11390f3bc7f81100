"""The Arrow schema read() yields is exactly what Spark derives from the declared schema."""

from pyspark.sql.pandas.types import to_arrow_schema

from hpbroker.spark.schema import ARROW_SCHEMA, SPARK_SCHEMA


def test_arrow_schema_is_sparks():
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC").equals(ARROW_SCHEMA)


def test_columns_are_those_of_sparks_kafka_source():
    assert SPARK_SCHEMA.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "timestampType:int,headers:array<struct<key:string,value:binary>>>")
