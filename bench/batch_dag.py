"""A `pos_batch` DAG run through Airflow against the batch job's own in-process time,
over the same hour of receipts: what Airflow and Spark's fixed costs add to a small run.

    python -m bench.batch_dag [--rounds 2] [--count 5000]

One hour of `--count` receipts from the project's simulator (20 stores, resends and
malformed messages, the producer's ledger beside them) goes to a topic of its own and is
archived by `pos-speed run --available-now --jobs archiver` (its own consumer group)
into a data dir of its own. Then, every round, each on a fresh keyspace and a fresh copy
of that master dataset (the first run of a keyspace builds every view from every
record, and switches the table's change data feed on, which would spare the next run
that commit), alternated (every other round in the other order):

- (a) **plain**: `pos-batch run --quality` over the hour as a process of its own, timed
  from its start to its exit; its JSON line splits that into the session's start (the
  JVM's among it), the run and the quality check; the rest is the process's own start
  and exit.
- (b) **dag**: a `pos_batch` run over the hour through the real Airflow, triggered
  through its REST API with `conf.pos_env` naming the bench's keyspace, topic, data dir
  and archiver group (dev/src/pos_lambda_dev/demo/batch_dag.py, as `make demo` does), timed by
  Airflow's own records from the trigger (the run's `queued_at`) to its end
  (`end_date`), with each task's time, the time before the first task and between
  tasks, and (from the recompute task's log) its spark-submit's split.

Figures: (b)/(a) (goal <= 1.5, issue 49), medians of the rounds; the per-task times; the
plain run's fixed cost against its work. Every run's committed batch aggregates are
compared with the ledger's (an independent computation), and its receipt count and
quality check with the ledger's receipts and windows: a run that differs stops the
benchmark. Needs `make up`; starts Airflow if it is not running (and stops it after).
Writes docs/bench/batch_dag.json (bench/results.py; --no-json: don't); drops its
keyspaces and topic at the end.
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from itertools import pairwise
from pathlib import Path
from typing import Any

from bench import harness
from bench import results as bench_results
from pos_lambda.adapters import cassandra_client, schema_apply
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
from pos_lambda.schemas import cql
from pos_lambda.settings import Settings, load_settings

# A past hour (a run's interval must have ended), its own logical date in Airflow.
HOUR = datetime(2026, 3, 3, 12, tzinfo=UTC)
DAG_ID = "pos_batch"
STORES = 20
TASKS = ("await_archive", "recompute", "quality")
GOAL = bench_results.Goal("<=", 1.5, "issue 49: a DAG run's cost against its job's")


# --- what a DAG run's time went to (pure) --------------------------------------------


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def timeline(run: Mapping[str, Any], tis: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Seconds of a finished DAG run, from Airflow's records: trigger -> end (`total`),
    trigger -> first task's start, each task's own time, the gaps between tasks, last
    task's end -> the run's end, and Airflow's share (total less the tasks' time)."""
    queued, end = _at(run["queued_at"]), _at(run["end_date"])
    tasks = sorted(tis, key=lambda t: _at(t["start_date"]))
    out = {
        "total": (end - queued).total_seconds(),
        "to_first_task": (_at(tasks[0]["start_date"]) - queued).total_seconds(),
        "between_tasks": sum(
            (_at(b["start_date"]) - _at(a["end_date"])).total_seconds() for a, b in pairwise(tasks)
        ),
        "after_last_task": (end - _at(tasks[-1]["end_date"])).total_seconds(),
    }
    for t in tasks:
        out[t["task_id"]] = (_at(t["end_date"]) - _at(t["start_date"])).total_seconds()
    out["airflow"] = out["total"] - sum(out[t["task_id"]] for t in tasks)
    return out


def job_line(lines: Sequence[str]) -> dict[str, Any]:
    """The JSON line `pos-batch run` printed (its bookkeeping and "seconds")."""
    for line in reversed(lines):
        if line.startswith("{") and '"seconds"' in line:
            found: dict[str, Any] = json.loads(line)
            return found
    raise ValueError("no JSON line with the run's seconds in the output")


def task_log_lines(path: Path) -> list[str]:
    """The events of an Airflow 3 task log (JSON lines; a subprocess's output lines are
    events too)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(str(json.loads(line).get("event", "")))
        except ValueError:
            continue
    return out


# --- the shell -------------------------------------------------------------------------


class Bench:
    def __init__(self, settings: Settings, tmp: Path, count: int) -> None:
        tag = uuid.uuid4().hex[:8]
        self.settings = settings
        self.tmp = tmp
        self.count = count
        self.topic = f"bench-batch-dag-{tag}"
        self.group = f"bench-batch-dag-archiver-{tag}"
        self.prefix = f"bench_dag_{tag}"
        self.keyspaces: list[str] = []
        self.ledger = tmp / "ledger"
        self.archive = tmp / "archive"
        self.start, self.end = HOUR, HOUR + timedelta(hours=1)

    def env(self, keyspace: str, data: Path) -> dict[str, str]:
        """A run's POS_* namespace: the same for the plain process and the DAG's tasks."""
        return {
            "POS_CASSANDRA_KEYSPACE": keyspace,
            "POS_TOPIC_TRANSACTIONS": self.topic,
            "POS_DATA_DIR": str(data),
            "POS_SPEED_ARCHIVER_GROUP": self.group,
        }

    def keyspace(self, name: str) -> str:
        ks = f"{self.prefix}_{name}"
        schema_apply.apply_cql(self.settings, ks)
        self.keyspaces.append(ks)
        return ks

    def produce_and_archive(self) -> None:
        config = SimulationConfig(
            count=self.count, seed=11, start=HOUR, stores=STORES,
            # ~46 minutes of simulated time at this hour's peak traffic, so that one
            # hour holds every receipt; resends and malformed messages as the field has.
            mean_gap_s=0.6 * 5000 / self.count,
            faults=FaultConfig(resend_rate=0.006, malformed_rate=0.005),
        )  # fmt: skip
        sim = simulate(config)
        happened = [datetime.fromisoformat(r["happened_at"]) for r in sim.receipts]
        if not (self.start <= min(happened) and max(happened) < self.end):
            raise SystemExit(f"the simulation spilled out of the hour: {max(happened)}")
        ledger_files.write(self.ledger, sim.receipts, sim.faults, sim.summary)
        schema_apply.create_topics(self.settings, {self.topic: self.settings.topics.partitions})
        stats = produce(
            sim.messages, self.settings.bootstrap_servers, self.topic, quiet=True,
            security=self.settings.kafka.security_config,
        )  # fmt: skip
        print(f"produced {stats.acked:,} messages ({self.count:,} receipts) to {self.topic}")
        env = harness.pipeline_env(
            self.keyspace("archive"), self.archive, self.topic,
            extra={**harness.ONE_BATCH, "POS_SPEED_ARCHIVER_GROUP": self.group},
        )  # fmt: skip
        took, _ = harness.timed(
            lambda: harness.run_pipeline(
                "pos-speed", "run", "--available-now", "--jobs", "archiver", env=env
            )
        )
        print(f"archived them into {self.archive / 'master'} in {took:.0f} s")

    def data_dir(self, name: str) -> Path:
        """A fresh copy of the archived master dataset."""
        data = self.tmp / name
        shutil.copytree(self.archive / "master", data / "master")
        return data

    def interval_args(self) -> list[str]:
        return ["--start", self.start.isoformat(), "--end", self.end.isoformat()]

    def plain(self, rnd: int) -> dict[str, Any]:
        ks, data = self.keyspace(f"plain{rnd}"), self.data_dir(f"plain{rnd}")
        env = {**harness.pipeline_env(ks, data, self.topic), **self.env(ks, data)}
        took, done = harness.timed(
            lambda: harness.run_pipeline(
                "pos-batch", "run", "--quality", *self.interval_args(), env=env
            )
        )
        line = job_line(done.stdout.splitlines())
        s = line["seconds"]
        out = {
            "contender": "plain", "round": rnd, "keyspace": ks, "total_s": took,
            "session_s": s["session"], "run_s": s["run"], "quality_s": s["quality"],
            "receipts": line["receipts"], "quality": line["quality"],
        }  # fmt: skip
        print(
            f"round {rnd}, plain `pos-batch run --quality`: {took:.1f} s (session start "
            f"{s['session']:.1f} s, run {s['run']:.1f} s, quality {s['quality']:.1f} s)"
        )
        return out

    def dag(self, rnd: int) -> dict[str, Any]:
        from pos_lambda_dev.demo import batch_dag
        from pos_lambda_dev.demo.airflow_api import AirflowApi
        from pos_lambda_dev.runtime import airflow_service

        ks, data = self.keyspace(f"dag{rnd}"), self.data_dir(f"dag{rnd}")
        run_id = f"bench-{self.prefix}-{rnd}"
        done = batch_dag.run_dag(
            self.settings, self.env(ks, data), self.start, self.end, run_id, _say, 900
        )
        api = AirflowApi(self.settings)
        if done.was_paused:
            # Unpaused for this run, the scheduler starts the DAG's latest hourly run as
            # soon as ours ends (before the run is seen done and the DAG paused again):
            # over the default namespace, and it would hold the next round's run back
            # (max_active_runs=1). It is this benchmark's doing: delete it.
            for other in api.runs(DAG_ID, ("queued", "running")):
                api.fail_run(DAG_ID, other)  # a running run cannot be deleted
                api.delete_run(DAG_ID, other)
                _say(f"deleted {other}, started by the scheduler while the DAG was unpaused")
        times = timeline(api.dag_run(DAG_ID, run_id), api.task_instances(DAG_ID, run_id))
        out: dict[str, Any] = {"contender": "dag", "round": rnd, "keyspace": ks, **{
            f"{k}_s": v for k, v in times.items()}}  # fmt: skip
        log = (
            airflow_service.paths(self.settings).root / "logs" / f"dag_id={DAG_ID}"
            / f"run_id={run_id}" / "task_id=recompute" / "attempt=1.log"
        )  # fmt: skip
        line = job_line(task_log_lines(log))
        s = line["seconds"]
        out.update(
            recompute_session_s=s["session"], recompute_run_s=s["run"],
            recompute_quality_s=s["quality"], receipts=line["receipts"], quality=line["quality"],
        )  # fmt: skip
        print(
            f"round {rnd}, DAG run: {times['total']:.1f} s from trigger to success: "
            + ", ".join(f"{t} {times[t]:.1f} s" for t in TASKS)
            + f"; before the first task {times['to_first_task']:.1f} s, between tasks "
            f"{times['between_tasks']:.1f} s, after the last {times['after_last_task']:.1f} s"
            f"; recompute's spark-submit: session start {s['session']:.1f} s, run "
            f"{s['run']:.1f} s, quality {s['quality']:.1f} s"
        )
        return out

    def check(self, run: dict[str, Any]) -> list[str]:
        """What differs between the run's committed views and the ledger."""
        want = ledger_files.expected_aggregates(self.ledger)
        receipts = len(ledger_files.load_receipts(self.ledger))
        got = committed_aggregates(self.settings, run["keyspace"])
        problems = []
        if got != want:
            wrong = sum(1 for k in set(got) | set(want) if got.get(k) != want.get(k))
            problems.append(
                f"{run['contender']} round {run['round']}: {wrong} of {len(want)} windows differ"
            )
        if run["receipts"] != receipts:
            problems.append(f"{run['contender']}: {run['receipts']} receipts, ledger {receipts}")
        # The speed layer never ran: the batch fixed every window of the ledger's.
        quality = run["quality"]
        if (quality.get("windows"), quality.get("windows_fixed")) != (len(want), len(want)):
            problems.append(f"{run['contender']}: quality {quality}, ledger {len(want)} windows")
        return problems


def committed_aggregates(settings: Settings, keyspace: str) -> dict[tuple[int, datetime], Any]:
    """(store, window start) -> (receipts, quantity, revenue, late) of the batch versions
    the pointer serves, read back over CQL."""
    cluster = cassandra_client.cluster(settings)
    try:
        session = cluster.connect(keyspace)
        pointer = session.execute(
            f"SELECT day, version FROM {cql.BATCH_POINTER_TABLE} WHERE view_name = 'batch'"
        ).all()
        select = session.prepare(
            "SELECT operation_id, window_start, receipt_count, item_quantity, revenue, "
            f"late_count FROM {cql.AGG_BATCH_TABLE} WHERE day = ? AND version = ?"
        )
        out = {}
        for p in pointer:
            if p.day is None:
                continue
            for r in session.execute(select, (p.day, p.version), timeout=60):
                out[(r.operation_id, r.window_start.replace(tzinfo=UTC))] = (
                    r.receipt_count, r.item_quantity, Decimal(r.revenue), r.late_count
                )  # fmt: skip
        return out
    finally:
        cluster.shutdown()


def _say(line: str) -> None:
    print(f"  {line}", flush=True)


def figures(runs: list[dict[str, Any]]) -> list[bench_results.Figure]:
    """Medians of the rounds."""

    def median(contender: str, key: str) -> float:
        return float(statistics.median(r[key] for r in runs if r["contender"] == contender))

    plain, dag = median("plain", "total_s"), median("dag", "total_s")
    job = median("plain", "run_s") + median("plain", "quality_s")
    name = "`pos_batch` DAG run through Airflow, trigger -> success"
    peer = "`pos-batch run --quality`, one process, start -> exit"
    out = [
        bench_results.vs_peer(name, dag, "s", peer, plain, GOAL),
        bench_results.baseline(peer, plain, "s"),
        bench_results.vs_peer(
            "plain run's fixed cost (process, JVM, session start, exit)", plain - job, "s",
            "its job (run + quality check)", job,
        ),
        bench_results.baseline("plain run: session start (JVM included)",
                               median("plain", "session_s"), "s"),
        bench_results.baseline("plain run: the run", median("plain", "run_s"), "s"),
        bench_results.baseline("plain run: the quality check", median("plain", "quality_s"), "s"),
    ]  # fmt: skip
    for t in TASKS:
        out.append(bench_results.baseline(f"DAG task {t}", median("dag", f"{t}_s"), "s"))
    out += [
        bench_results.baseline("DAG: trigger -> first task start",
                               median("dag", "to_first_task_s"), "s"),
        bench_results.baseline("DAG: between tasks", median("dag", "between_tasks_s"), "s"),
        bench_results.baseline("DAG: last task end -> run end",
                               median("dag", "after_last_task_s"), "s"),
        bench_results.baseline("DAG: recompute's session start (spark-submit, JVM)",
                               median("dag", "recompute_session_s"), "s"),
    ]  # fmt: skip
    return out


def main() -> None:
    parser = harness.parser(__doc__, "batch_dag")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both runs (2)")
    parser.add_argument("--count", type=int, default=5000, help="receipts in the hour (5000)")
    args = parser.parse_args()
    if args.rounds < 1 or args.count < 1:
        parser.error("--rounds and --count must be at least 1")
    from pos_lambda_dev.demo import batch_dag

    settings = load_settings()
    tmp = Path(tempfile.mkdtemp(prefix="pos-bench-batch-dag-"))
    bench = Bench(settings, tmp, args.count)
    started_airflow = False
    runs: list[dict[str, Any]] = []
    try:
        bench.produce_and_archive()
        started_airflow = batch_dag.ensure_airflow(settings, _say)
        # Unmeasured: the first Spark driver of an application on a machine writes its
        # class data archive at exit (~10 s, once: src/pos_lambda/adapters/
        # spark_class_archive.py); every later plain run maps it.
        print("warm-up: one plain run, not measured")
        bench.plain(0)
        for rnd, contender in harness.alternate(args.rounds, ("plain", "dag"), reverse_odd=True):
            runs.append(bench.plain(rnd) if contender == "plain" else bench.dag(rnd))
        problems = [p for r in runs for p in bench.check(r)]  # the warm-up's unchecked
        if problems:
            raise SystemExit("results differ from the ledger:\n" + "\n".join(problems))
        print(f"every run's committed views equal the ledger's ({args.count:,} receipts)")
    finally:
        if started_airflow:
            from pos_lambda_dev.runtime import airflow_service

            airflow_service.stop(settings)
        harness.drop(settings, bench.keyspaces, [bench.topic])
        shutil.rmtree(tmp, ignore_errors=True)
    figs = figures(runs)
    print(f"DAG run / plain run = {figs[0].ratio:.2f} (goal {GOAL.op} {GOAL.ratio})")
    bench_results.write(
        args, "batch_dag", figs, runs,
        notes=f"one hour of {args.count:,} receipts (20 stores, resends, malformed "
        "messages), archived once; each run on a fresh keyspace and copy of the master "
        f"dataset; medians of {args.rounds} alternated round(s); the DAG run timed by "
        "Airflow's records (queued_at -> end_date), the plain run from process start to "
        "exit; every run's committed aggregates checked against the producer's ledger",
    )  # fmt: skip


if __name__ == "__main__":
    main()
