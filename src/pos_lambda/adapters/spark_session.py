"""The one place that builds a SparkSession; every job gets its session here.

Local mode (`local[*]`) by default. The Kafka source, the Cassandra connector and
Delta Lake (the master dataset's table format) come as local jar paths from the jar
cache (Spark's own package resolver ignores Maven mirrors, and resolving at every
start is slow). Point `POS_SPARK_MASTER`,
`POS_KAFKA_BOOTSTRAP_SERVERS` and `POS_CASSANDRA_HOSTS` at clusters and the same
jobs run there unchanged.
"""

from __future__ import annotations

import atexit
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pos_lambda.adapters import spark_class_archive as class_archive
from pos_lambda.adapters.java import find_java17, java_major
from pos_lambda.adapters.service import ServiceError
from pos_lambda.settings import Settings, is_loopback

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J2_FILE = Path(__file__).with_name("spark-log4j2.properties")
SCHEDULER_POOLS_FILE = Path(__file__).with_name("spark-scheduler-pools.xml")
REQUIRED_JARS = (
    "spark-sql-kafka-0-10_2.12-",
    "spark-cassandra-connector_2.12-",
    "delta-spark_2.12-",
)
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
)
# Both SQL extensions in one comma-separated list: the connector's (Cassandra functions,
# direct joins) and Delta's (OPTIMIZE, VACUUM, DESCRIBE HISTORY, time travel).
SQL_EXTENSIONS = (
    "com.datastax.spark.connector.CassandraSparkExtensions",
    "io.delta.sql.DeltaSparkSessionExtension",
)


def spark_home() -> Path:
    """The pinned PySpark package: its `bin/spark-class` and `jars/` are a Spark home."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def on_this_machine(master: str) -> bool:
    """Local mode, or a standalone master on a loopback address (`pos-infra spark up`):
    the driver, the executors and their Python workers all run here."""
    if master.startswith("local"):
        return True
    if not master.startswith("spark://"):
        return False
    hosts = [h.rsplit(":", 1)[0] for h in master.removeprefix("spark://").split(",")]
    return all(is_loopback(h) for h in hosts)


def spark_jars(settings: Settings) -> list[Path]:
    jars = sorted((settings.jars_dir / "spark").glob("*.jar"))
    missing = [p for p in REQUIRED_JARS if not any(j.name.startswith(p) for j in jars)]
    if missing:
        raise ServiceError(
            f"Spark jars {missing} missing in {settings.jars_dir / 'spark'}: run `make jars`."
        )
    return jars


def spark_conf(
    settings: Settings, app_name: str, java_options: tuple[str, ...] = ()
) -> dict[str, str]:
    """The session's configuration as plain data (pure, so it is unit-tested);
    `java_options` are added to the driver JVM's (its class archive's)."""
    conf = {
        "spark.master": settings.spark.master,
        "spark.app.name": app_name,
        "spark.jars": ",".join(str(j) for j in spark_jars(settings)),
        "spark.driver.memory": settings.spark.driver_memory,
        "spark.sql.shuffle.partitions": str(settings.spark.shuffle_partitions),
        # Event time is stored and windowed in UTC whatever the machine's zone.
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.extensions": ",".join(SQL_EXTENSIONS),
        # Delta's catalog in place of the session catalog, so that path-based Delta
        # tables (`delta.`<path>``) resolve in SQL.
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.cassandra.connection.host": ",".join(settings.cassandra_contact_points),
        "spark.cassandra.connection.port": str(settings.cassandra.port),
        # The connector's defaults (5 concurrent writes, 1 KiB batches) leave Cassandra
        # idle on a backlog; batches stay under Cassandra's 5 KiB batch warning. The
        # limit holds whatever the input: the connector closes a batch before a row
        # would take it past the limit, and a row larger than it goes alone (its Batch
        # adds a statement to an empty batch by force), so a request is at most 4 KiB
        # or one row, and every row is bounded (a dead letter keeps a value prefix).
        "spark.cassandra.output.concurrent.writes": str(settings.cassandra.concurrent_writes),
        "spark.cassandra.output.batch.size.bytes": "4096",
        # Settings, not code: with RF 3 the speed layer's read-back of the previous
        # micro-batch is exact only when read + write levels overlap (LOCAL_QUORUM twice).
        "spark.cassandra.input.consistency.level": settings.cassandra.read_consistency,
        "spark.cassandra.output.consistency.level": settings.cassandra.write_consistency,
        **(
            {"spark.cassandra.connection.localDC": settings.cassandra.local_dc}
            if settings.cassandra.local_dc
            else {}
        ),
        # Generated classes are cached by source code, 100 of them by default. A speed
        # micro-batch plans some ten actions (two queries, several stages each), more
        # distinct classes than that, so with the default Janino compiles classes again
        # every micro-batch: a fixed cost per micro-batch whatever its size. Room for all
        # of them compiles each once (measured: docs/speed-performance.md).
        "spark.sql.codegen.cache.maxEntries": "2000",
        # Every Delta commit with an idempotency id (the archiver's streaming sink: its
        # query id and batch id) rebuilds the table's state to read the ids committed
        # so far, in a Spark job of `snapshotPartitions` tasks, 50 by default. On one
        # machine a few tasks rebuild it as fast; 50 are a fixed cost per archiver
        # micro-batch on two cores, which delays the views query beside it (measured:
        # docs/speed-performance.md; raise it on a cluster with a large table).
        "spark.databricks.delta.snapshotPartitions": str(settings.spark.delta_snapshot_partitions),
        # Every Delta table this session creates (the master dataset) records its change
        # data feed: a batch run can then read just the records added between two table
        # versions (`pos_lambda.adapters.master_dataset.added`). For appends it costs nothing: the
        # feed's inserts are read from the data files themselves.
        "spark.databricks.delta.properties.defaults.enableChangeDataFeed": "true",
        # Every micro-batch writes two small files to its query's checkpoint (the offsets
        # it will read, then its commit). Spark's default manager writes them through
        # Hadoop's FileContext, whose rename on a local disk without Hadoop's native
        # library starts a `readlink` process per path it checks, 16 per micro-batch
        # (with a `chmod` per file created: 20 processes), a fixed cost of every
        # micro-batch in Spark's walCommit and commitOffsets (measured:
        # docs/speed-performance.md). Through the FileSystem API the rename is Java's;
        # the manager checks, as Spark's own metadata log does, that the batch's file is
        # not there yet, so a second run on the same checkpoint still fails rather than
        # overwrite (only the rename's own atomic check, a microseconds' window, goes).
        "spark.sql.streaming.checkpointFileManagerClass": CHECKPOINT_FILE_MANAGER,
        # Where the speed layer's two queries share one driver (POS_SPEED_DRIVERS=shared,
        # a cluster master): each runs in a pool of its own (speed_layer/triggers.py), the
        # views query first (see the pools file).
        "spark.scheduler.mode": settings.spark.scheduler_mode,
        # Python workers that do not re-read Spark's zip archives before every task
        # (~60 ms of CPU per task on Python 3.11) nor run a full garbage collection
        # after it (~80 ms in the views query's workers): adapters/spark_python_daemon.py.
        "spark.python.daemon.module": settings.spark.python_daemon_module,
        "spark.scheduler.allocation.file": str(SCHEDULER_POOLS_FILE),
        # DataFrames from pandas through Arrow: a local relation, no Spark job of their
        # own (the rows a small micro-batch reads from the driver: adapters/driver_lookup.py).
        # No silent fallback to the slower path: a column Arrow cannot take is an error.
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.execution.arrow.pyspark.fallback.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": " ".join(
            filter(
                None,
                [
                    f"-Dlog4j.configurationFile={LOG4J2_FILE}",
                    settings.spark.driver_java_options,
                    *java_options,
                ],
            )
        ),
    }
    if settings.cassandra.username:
        # Spark redacts *password* keys in its UI and logs (spark.redaction.regex).
        conf |= {
            "spark.cassandra.auth.username": settings.cassandra.username,
            "spark.cassandra.auth.password": settings.cassandra.password.get_secret_value(),
        }
    if on_this_machine(settings.spark.master):
        # One machine: keep the driver on loopback (executors reach it there) and the UI
        # off. On a real cluster the executors must reach the driver, so Spark's default
        # (this host's address) stays.
        conf |= {
            "spark.driver.host": settings.bind_host,
            "spark.driver.bindAddress": settings.bind_host,
            "spark.ui.enabled": "false",
        }
    return conf


def _class_archive(settings: Settings, app_name: str) -> class_archive.Plan | None:
    """What the driver's new JVM does with its class archive, or None: no archive."""
    elsewhere = (os.environ.get(name, "") for name in class_archive.OPTION_VARIABLES)
    if clashing := class_archive.clash(settings.spark.driver_java_options, *elsewhere):
        class_archive.log.info(
            "no class archive for %s: JDK 17 cannot use one with %s", app_name, clashing
        )
        return None
    java = Path(os.environ["JAVA_HOME"]) / "bin" / "java"
    # PySpark launches the JVM from SPARK_HOME when set, else from its own package.
    spark_dir = Path(os.environ.get("SPARK_HOME") or spark_home())
    classpath = [*(spark_dir / "jars").glob("*.jar"), *spark_jars(settings)]
    try:
        return class_archive.plan(settings.class_archive_dir, app_name, java, classpath)
    except OSError as exc:  # e.g. a read-only state dir: start as without an archive
        class_archive.log.warning("no class archive for %s: %s", app_name, exc)
        return None


def build_session(settings: Settings, app_name: str) -> SparkSession:
    """Get or create the session for `app_name` with the project's jars and endpoints."""
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    # PySpark launches its JVM from JAVA_HOME; pin it to the JDK 17 the jars target.
    home = os.environ.get("JAVA_HOME")
    if settings.java_home is not None or not home or java_major(Path(home) / "bin" / "java") != 17:
        os.environ["JAVA_HOME"] = str(find_java17(settings.java_home).parent.parent)
    # Python workers must run this interpreter (the project's venv), not whatever
    # `python3` is on PATH. The executors run the path the driver names, so this holds
    # for a standalone worker on this machine too; on a cluster, point PYSPARK_PYTHON at
    # the workers' env (with this project installed: the jobs' functions are imported there).
    if on_this_machine(settings.spark.master):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    # A JVM of its own, unless this process already has one (PySpark keeps its gateway
    # after `stop()`, and a new session reuses it: options for a new JVM would not apply).
    archive = None
    if settings.spark.class_archives and SparkContext._gateway is None:
        archive = _class_archive(settings, app_name)
    builder = SparkSession.builder
    options = archive.java_options if archive else ()
    for key, value in spark_conf(settings, app_name, options).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    gateway = SparkContext._gateway
    if archive is not None and archive.writes is not None and gateway is not None:
        # At the process's end, once the driver is done with Spark (PySpark's JVM lives
        # until then): the JVM writes the archive as it exits.
        atexit.register(class_archive.publish, archive, gateway.proc)
    return session
