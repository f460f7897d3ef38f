"""Cassandra adapter for DataFrames (Spark Cassandra Connector), one place for its options.

Writes are upserts by primary key: the connector turns every row into an INSERT,
which Cassandra applies as last-write-wins per cell. That is what makes a replayed
micro-batch harmless: it rewrites the same keys with the same absolute values.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

FORMAT = "org.apache.spark.sql.cassandra"


def read_table(spark: SparkSession, keyspace: str, table: str) -> DataFrame:
    return spark.read.format(FORMAT).options(keyspace=keyspace, table=table).load()


def upsert(df: DataFrame, keyspace: str, table: str) -> None:
    (
        df.write.format(FORMAT)
        .options(keyspace=keyspace, table=table)
        .mode("append")  # "append" = INSERT = upsert; "overwrite" would TRUNCATE the table
        .save()
    )
