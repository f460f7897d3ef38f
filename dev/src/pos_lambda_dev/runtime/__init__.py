"""The local development runtime: start, stop and inspect Kafka, Cassandra, Spark and
Airflow on this machine, fetch their jars, find the JDK. Production code never imports
it (tests/unit/test_layout.py checks); the jobs reach services through `adapters`."""
