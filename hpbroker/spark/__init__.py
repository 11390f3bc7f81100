"""PySpark reads of Kafka segment directories, with no broker in the path.

* ``source``     the ``hpbroker`` Python Data Source: batch and streaming readers
* ``options``    the reader options (Spark's Kafka source names)
* ``plan``       driver side: readable offsets per partition, input partitions
* ``read``       executor side: one input partition -> Arrow record batches
* ``to_arrow``   decoded batches -> Arrow columns (numba record-decode kernel)
* ``gather``     Arrow binary columns from byte spans (a numba copy loop)
* ``segment``    read-only mmap of a segment and its ``.index``
* ``txnindex``   Kafka's ``.txnindex`` (aborted transactions)
* ``logdir``     partitions, segments and checkpoints of a log directory
* ``ratelimit``  maxRecordsPerTrigger / maxBytesPerTrigger
* ``schema``     the rows: Spark's Kafka source schema

It imports only the storage package's file naming and checkpoint reading, the
kernels and the record codec (``tests/test_dependencies.py``): it never opens a
log the way a broker does, takes no lock and writes nothing, so executors read
a directory a live broker (hpbroker or Apache Kafka) owns.

    from hpbroker.spark import register
    register(spark)
    df = spark.read.format("hpbroker").option("subscribe", "events").load("/var/lib/hpbroker/data")
"""

from hpbroker.spark.source import HpbrokerDataSource


def register(spark) -> None:
    """Make ``format("hpbroker")`` available in this session."""
    spark.dataSource.register(HpbrokerDataSource)


__all__ = ["HpbrokerDataSource", "register"]
