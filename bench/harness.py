"""What the benchmarks share: their command line, rounds and medians, the pipeline run as
a subprocess (its environment, one-shot `pos-speed run`, the speed layer as a process
and its progress), the ledger check, the services' CPU, and the cleanup of what a run
created in the shared Kafka and Cassandra.

    parser = harness.parser(__doc__, "speed_backlog")  # --json PATH, --no-json
    for rnd, (name, tree) in harness.alternate(args.rounds, codes.items()):
        status = harness.speed_once(topic, keyspace, data, "views", tree)
        rates[name].append(status[QUERY_OF_JOB["views"]]["processed_rows_per_second"])
    medians = harness.medians(rates)

Another revision's code (`tree`) is run through bench.revisions, in whichever layout
that revision has.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from bench import results, revisions
from pos_lambda.adapters import cassandra_client
from pos_lambda.adapters.service import wait_for
from pos_lambda.producer.ledger import expected_aggregates, load_receipts
from pos_lambda.schemas import cql
from pos_lambda.schemas.cql import SPEED_QUERY_OF_JOB
from pos_lambda.settings import Settings

T = TypeVar("T")
K = TypeVar("K")

# `pos-speed run --jobs` names -> their streaming queries' names (views first).
QUERY_OF_JOB = {job: SPEED_QUERY_OF_JOB[job] for job in ("views", "archiver")}
QUERIES = tuple(QUERY_OF_JOB.values())
# The environment that makes `pos-speed run --available-now` take a whole backlog in
# one micro-batch.
ONE_BATCH = {"POS_SPEED_MAX_OFFSETS_PER_TRIGGER": "1000000"}


# --- the command line and the rounds ---------------------------------------------------------


def parser(doc: str | None, benchmark: str | None = None) -> argparse.ArgumentParser:
    """A benchmark's command line, its module's doc as the help; with `benchmark`, also
    --json PATH (default docs/bench/<benchmark>.json) and --no-json (bench.results)."""
    out = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if benchmark is not None:
        results.add_json_argument(out, benchmark)
    return out


def alternate(rounds: int, contenders: Iterable[T], reverse_odd: bool = False) -> Iterator[
    tuple[int, T]
]:  # fmt: skip
    """(round from 1, contender): every contender in every round, in the given order; with
    `reverse_odd`, every other round in reverse, so that no contender always runs right
    after the same one (Cassandra still flushing the last run's writes, say)."""
    order = list(contenders)
    for rnd in range(rounds):
        for contender in order[::-1] if reverse_odd and rnd % 2 else order:
            yield rnd + 1, contender


def medians(samples: Mapping[K, Iterable[float]]) -> dict[K, float]:
    """The median of each contender's rounds."""
    return {name: statistics.median(values) for name, values in samples.items()}


def timed(fn: Callable[[], T]) -> tuple[float, T]:
    """(seconds fn took, what it returned)."""
    t0 = time.perf_counter()
    value = fn()
    return time.perf_counter() - t0, value


# --- the pipeline as a subprocess ----------------------------------------------------------


def pipeline_env(
    keyspace: str,
    data: Path,
    topic: str | None = None,
    tree: Path | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a subprocess of the pipeline (`tree`'s code, None: this
    checkout's): this process's, its keyspace, data dir (checkpoints, status, master
    dataset) and topic, and `extra` POS_ settings."""
    env = {**os.environ, "POS_CASSANDRA_KEYSPACE": keyspace, "POS_DATA_DIR": str(data)}
    if topic is not None:
        env["POS_TOPIC_TRANSACTIONS"] = topic
    return revisions.code_env(tree, {**env, **(extra or {})})


def run_pipeline(
    command: str, *args: str, env: Mapping[str, str], tree: Path | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """A console script of the pipeline (`pos-speed`, `pos-provision`, `pos-batch`) of
    `tree`'s code (None: this checkout's) as a process; check: its failure stops the
    benchmark, with the end of what it said."""
    argv, cwd = revisions.pipeline(command, *args, tree=tree)
    done = subprocess.run(argv, env=dict(env), cwd=cwd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"{command} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def speed_once(
    topic: str,
    keyspace: str,
    data: Path,
    jobs: str = "views",
    tree: Path | None = None,
) -> dict[str, Any]:
    """`pos-speed run --available-now --jobs JOBS` of `tree`'s code (None: this
    checkout's) over the whole topic in one micro-batch (ONE_BATCH), into `keyspace`
    (its tables already there), `data` its data dir: its status file (speed_status.json:
    each query's last micro-batch)."""
    env = pipeline_env(keyspace, data, topic, tree, ONE_BATCH)
    run_pipeline("pos-speed", "run", "--available-now", "--jobs", jobs, env=env, tree=tree)
    status: dict[str, Any] = json.loads((data / "speed_status.json").read_text())
    return status


class SpeedLayer:
    """`pos-speed run` (supervisor + driver) in its own process group, logging to a file."""

    def __init__(
        self, env: Mapping[str, str], args: Sequence[str], log: Path, tree: Path | None = None
    ) -> None:
        """env: from pipeline_env; tree: a checkout of other code to run (a `--baseline`);
        None: this one."""
        self.log = log
        # One log for every run of the benchmark: this run's lines start here (an earlier
        # run's "query ... started" must not count as this one's start).
        self.start = log.stat().st_size if log.exists() else 0
        argv, cwd = revisions.pipeline("pos-speed", "run", *args, tree=tree)
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(
                argv, env=revisions.code_env(tree, env), cwd=cwd, stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the driver child is stopped with it
            )  # fmt: skip

    def logged(self, text: str) -> bool:
        try:
            with open(self.log, "rb") as f:
                f.seek(self.start)
                return text in f.read().decode(errors="replace")
        except FileNotFoundError:
            return False

    def await_started(self, timeout: float, queries: tuple[str, ...] = QUERIES) -> None:
        def started() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pos-speed exited ({self.proc.returncode}):\n{self.tail()}")
            return all(self.logged(f"query {q} started") for q in queries)

        if not wait_for(started, timeout=timeout, interval=0.5):
            raise RuntimeError(f"pos-speed queries not started in {timeout:.0f} s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the supervisor forwards it to the driver
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)  # the group we started, by its id
                self.proc.wait(timeout=30)


class ProgressReader:
    """Reads `speed_progress` over one Cassandra session, kept for as long as a wait
    polls it (a connection per poll would take CPU from the layer being measured)."""

    def __init__(self, settings: Settings, keyspace: str) -> None:
        self._cluster = cassandra_client.cluster(settings)
        try:
            self._session = self._cluster.connect(keyspace)
            self._stmt = self._session.prepare(
                f"SELECT query_name, batch_id, finished_at, input_rows, duration_ms "
                f"FROM {cql.SPEED_PROGRESS_TABLE} WHERE query_name = ?"
            )
        except Exception:
            self._cluster.shutdown()
            raise

    def rows(self) -> list[dict[str, Any]]:
        """Every micro-batch the speed layer recorded so far."""
        return [r._asdict() for q in QUERIES for r in self._session.execute(self._stmt, (q,))]

    def __enter__(self) -> ProgressReader:
        return self

    def __exit__(self, *_: object) -> None:
        self._cluster.shutdown()


def progress_rows(settings: Settings, keyspace: str) -> list[dict[str, Any]]:
    """Every micro-batch the speed layer recorded in `speed_progress` (one read)."""
    with ProgressReader(settings, keyspace) as reader:
        return reader.rows()


# --- checks, the services, cleanup ---------------------------------------------------------


def check_ledger(settings: Settings, keyspace: str, ledger: Path) -> list[str]:
    """Differences between the speed views in `keyspace` (receipts_by_store_day,
    agg_15m_speed) and the producer's ledger (none: exact)."""
    from decimal import Decimal

    cluster = cassandra_client.cluster(settings)
    session = cluster.connect(keyspace)
    try:
        rows = session.execute(
            f"SELECT operation_id, vendor_fiscal_module, transaction_id, item_quantity, revenue,"
            f" late FROM {cql.RAW_TABLE}"
        ).all()
        aggs = session.execute(
            f"SELECT operation_id, window_start, receipt_count, item_quantity, revenue,"
            f" late_count FROM {cql.AGG_SPEED_TABLE}"
        ).all()
    finally:
        cluster.shutdown()
    problems = []
    stored = {(r.operation_id, r.vendor_fiscal_module, r.transaction_id): r for r in rows}
    if len(stored) != len(rows):
        problems.append(f"{len(rows) - len(stored)} natural keys stored twice")
    expected = load_receipts(ledger)
    if set(stored) != set(expected):
        missing, extra = len(set(expected) - set(stored)), len(set(stored) - set(expected))
        problems.append(f"raw rows: {missing} missing, {extra} extra")
    for key in set(stored) & set(expected):
        row, want = stored[key], expected[key]
        got = (row.item_quantity, Decimal(row.revenue), row.late)
        if got != (int(want["item_quantity"]), Decimal(want["revenue"]), want["late"]):
            problems.append(f"raw row {key}: {got} != ledger")
            break
    want_aggs = {(s, ws.replace(tzinfo=None)): tuple(a) for (s, ws), a in
                 expected_aggregates(ledger).items()}  # fmt: skip
    got_aggs = {
        (a.operation_id, a.window_start): (
            a.receipt_count, a.item_quantity, Decimal(a.revenue), a.late_count
        )
        for a in aggs
    }  # fmt: skip
    if got_aggs != want_aggs:
        wrong = sum(
            1 for k in set(got_aggs) | set(want_aggs) if got_aggs.get(k) != want_aggs.get(k)
        )
        problems.append(f"aggregates: {wrong} of {len(want_aggs)} windows differ")
    return problems


def service_pids(settings: Settings) -> dict[str, int]:
    """The local Kafka's and Cassandra's process ids, for a CpuMeter (bench.cpu_meter):
    the services' own CPU beside the machine's. On a cluster: none (the machine's only)."""
    from pos_lambda_dev.runtime import cassandra_service, kafka_service

    pids = {"kafka": kafka_service.process(settings).pid(),
            "cassandra": cassandra_service.process(settings).pid()}  # fmt: skip
    return {name: pid for name, pid in pids.items() if pid is not None}


def drop(settings: Settings, keyspaces: Sequence[str], topics: Sequence[str] = ()) -> None:
    """This run's keyspaces and topics only (Cassandra and Kafka are shared)."""
    if keyspaces:
        cluster = cassandra_client.cluster(settings, writes=True)
        try:
            session = cluster.connect()
            for ks in keyspaces:
                session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
        finally:
            cluster.shutdown()
    if topics:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({**settings.kafka.security_config,
                             "bootstrap.servers": settings.bootstrap_servers})  # fmt: skip
        for topic, done in admin.delete_topics(list(topics), operation_timeout=30).items():
            try:
                done.result()
            except Exception as exc:  # left behind: say so, the results still stand
                print(f"could not delete topic {topic}: {exc}", file=sys.stderr)
