"""The deploy path on a real Docker engine (`make deploy-test`): the pipeline image built,
compose.yaml's services up with host networking against the project's own Kafka and
Cassandra, the demo's stream through them, a `restart speed` mid-stream, and the
auditor's verdict against the producer's ledger.

What runs in containers: the speed layer, the alerts processor and its sink, the
deduplicated topic's processor, the serving API, the two init steps, the batch job (a
one-off container of the same image and volume). What does not: Kafka, Cassandra and
Airflow's PostgreSQL come from Docker Hub in compose.yaml, which this machine cannot
reach (docs/deploy.md, "What the deploy test proves"). Figures go to stdout and to
.state/deploy/report.json.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from pos_lambda.producer import ledger
from pos_lambda.producer.kafka_sink import produce
from pos_lambda.producer.simulation import FaultConfig, SimulationConfig, simulate
from pos_lambda.settings import PROJECT_ROOT, Settings
from pos_lambda_dev.demo import steps
from pos_lambda_dev.demo.cli import FAULTS
from pos_lambda_dev.demo.conflicts import add_conflicts, summary_with
from tests.deploy.compose import Compose, await_state, docker, engine_answers, image_size_bytes

# A fresh image build alone can take 10 minutes where no layer is cached.
pytestmark = [pytest.mark.deploy, pytest.mark.timeout(3600)]

IMAGE_TAG = os.environ.get("POS_IMAGE_TAG", "deploy-test")
# The base image: infra/docker/local-base.sh's, since Docker Hub is out of reach here.
PYTHON_IMAGE = os.environ.get("PYTHON_IMAGE", "pos-python:3.11-bookworm")
LOGS = PROJECT_ROOT / ".state" / "deploy"
SERVE_URL = "http://127.0.0.1:8000"
RECEIPTS = 5000  # the demo's stream: `pos-demo`'s defaults
SEED = 7
STORES = 20
# The pipeline services a user starts with `docker compose up -d`, and what each must
# reach: a health check where compose.yaml has one, running where it has none.
PIPELINE = {
    "speed": "healthy", "serve": "healthy",
    "alerts": "running", "alerts-sink": "running", "receipts": "running",
}  # fmt: skip
ONE_SHOTS = ("kafka-init", "cassandra-init")
STAND_INS = ("kafka", "cassandra")
STEP_TIMEOUT = 600.0


@dataclass
class Report:
    figures: dict[str, Any] = field(default_factory=dict)
    t0: float = field(default_factory=time.monotonic)

    def say(self, text: str) -> None:
        m, s = divmod(int(time.monotonic() - self.t0), 60)
        print(f"[deploy-test {m:02d}:{s:02d}] {text}", flush=True)

    def write(self) -> None:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / "report.json").write_text(json.dumps(self.figures, indent=2, default=str) + "\n")


@pytest.fixture(scope="module")
def report() -> Iterator[Report]:
    r = Report()
    yield r
    r.write()
    print(json.dumps(r.figures, indent=2, default=str), flush=True)


@pytest.fixture(scope="module")
def image(report: Report) -> str:
    """The pipeline image, built now by `make image` (layers cached from earlier builds)."""
    if not engine_answers():
        pytest.fail(
            "no Docker engine answers: start one with `infra/docker/engine.sh up` "
            "(`make deploy-test` does)",
            pytrace=False,
        )
    report.say(f"building the image pos-lambda:{IMAGE_TAG} from {PYTHON_IMAGE} (make image) ...")
    t0 = time.monotonic()
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / "build.log", "w") as log:
        code = subprocess.run(
            ["make", "--no-print-directory", "image", f"PYTHON_IMAGE={PYTHON_IMAGE}",
             f"IMAGE_TAG={IMAGE_TAG}"],
            cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=3600, check=False,
        ).returncode  # fmt: skip
    if code != 0:
        pytest.fail(f"make image exited {code}; log {LOGS / 'build.log'}", pytrace=False)
    took = time.monotonic() - t0
    size = image_size_bytes(IMAGE_TAG)
    user = docker("run", "--rm", "--network", "host", f"pos-lambda:{IMAGE_TAG}", "id", "-u").strip()
    report.figures |= {"build_s": round(took, 1), "image_bytes": size, "image_uid": user}
    report.say(f"image built in {took:.0f} s: {size / 1e9:.2f} GB, runs as uid {user}")
    return IMAGE_TAG


@pytest.fixture
def stack(
    image: str, services: Settings, tmp_path: Path, report: Report
) -> Iterator[tuple[Compose, Settings]]:
    """A compose project of its own: a fresh keyspace and topics, generated secrets,
    and afterwards nothing left on the engine (containers, volumes) or in the services."""
    run_id = uuid.uuid4().hex[:8]
    ns = {
        "POS_CASSANDRA_KEYSPACE": f"deploy_{run_id}",
        "POS_TOPIC_TRANSACTIONS": f"deploy.{run_id}.transactions",
        "POS_TOPIC_ALERTS": f"deploy.{run_id}.alerts",
        "POS_TOPIC_RECEIPTS": f"deploy.{run_id}.receipts",
        "POS_TOPIC_DEAD_LETTERS": f"deploy.{run_id}.dead_letters",
    }
    env_file = tmp_path / "deploy.env"
    secret_names = (
        "KAFKA_PIPELINE_PASSWORD", "CASSANDRA_ADMIN_PASSWORD", "CASSANDRA_PIPELINE_PASSWORD",
        "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_DB_PASSWORD", "AIRFLOW_FERNET_KEY",
        "AIRFLOW_JWT_SECRET", "AIRFLOW_API_SECRET_KEY",
    )  # fmt: skip
    lines = [f"{k}={secrets.token_urlsafe(24)}" for k in secret_names]
    lines += [f"{k}={v}" for k, v in ns.items()]
    lines += [
        f"POS_IMAGE_TAG={image}",
        f"POS_KAFKA_HOST_PORT={services.kafka.port}",
        f"POS_CASSANDRA_HOST_PORT={services.cassandra.port}",
    ]
    env_file.write_text("\n".join(lines) + "\n")
    compose = Compose(project=f"pos-deploy-{run_id}", env_file=env_file, log_dir=LOGS / run_id)
    host = services.with_overrides(
        cassandra_keyspace=ns["POS_CASSANDRA_KEYSPACE"],
        topic_transactions=ns["POS_TOPIC_TRANSACTIONS"],
        topic_alerts=ns["POS_TOPIC_ALERTS"],
        topic_receipts=ns["POS_TOPIC_RECEIPTS"],
        topic_dead_letters=ns["POS_TOPIC_DEAD_LETTERS"],
    )
    report.figures["project"] = compose.project
    try:
        yield compose, host
    finally:
        compose.save_logs([*STAND_INS, *ONE_SHOTS, *PIPELINE])
        t0 = time.monotonic()
        compose.down()
        report.figures["down_s"] = round(time.monotonic() - t0, 1)
        left = compose.leftovers()
        report.figures["left_running"] = left
        _delete_topics(host, list(ns.values())[1:])
        with steps.cql_session(host.with_overrides(cassandra_keyspace="system")) as cql:
            cql.execute(f"DROP KEYSPACE IF EXISTS {ns['POS_CASSANDRA_KEYSPACE']}", timeout=120)
        report.say(
            f"compose down in {report.figures['down_s']} s; left on the engine: {left or 'nothing'}"
        )
        assert left == [], f"compose down left {left}"


def _delete_topics(settings: Settings, topics: list[str]) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": settings.bootstrap_servers})
    for future in admin.delete_topics(topics, operation_timeout=60).values():
        try:
            future.result()
        except Exception as exc:  # a topic the failed run never created
            print(f"deploy-test: topic not deleted: {exc}", flush=True)


def _ledger_day_totals(path: Path) -> dict[tuple[int, str], tuple[int, Decimal]]:
    """(store, UTC day) -> (receipts, revenue), summed from the ledger alone."""
    out: dict[tuple[int, str], list[Any]] = defaultdict(lambda: [0, Decimal("0.00")])
    for r in ledger.load_receipts(path).values():
        day = datetime.fromisoformat(r["happened_at"]).astimezone(UTC).date().isoformat()
        cell = out[(r["operation_id"], day)]
        cell[0] += 1
        cell[1] += Decimal(r["revenue"])
    return {k: (v[0], v[1]) for k, v in out.items()}


def _get_json(path: str) -> Any:
    with urllib.request.urlopen(SERVE_URL + path, timeout=30) as answer:
        return json.loads(answer.read())


def test_compose_stack_runs_the_demo_stream_exact_through_a_speed_restart(
    stack: tuple[Compose, Settings], tmp_path: Path, report: Report
) -> None:
    compose, host = stack
    say = report.say

    # --- up: the real depends_on chain, each service's own health check ----------------
    say(f"compose up -d {' '.join(PIPELINE)} (project {compose.project}) ...")
    t_up = time.monotonic()
    compose.run("up", "-d", *PIPELINE)
    health: dict[str, float] = {}
    for service in STAND_INS:
        health[service] = await_state(compose, service, "healthy", STEP_TIMEOUT)
    for service in ONE_SHOTS:
        await_state(compose, service, "exited 0", STEP_TIMEOUT)
        health[service] = round(time.monotonic() - t_up, 1)
    for service in ("serve", "alerts", "alerts-sink", "receipts"):
        await_state(compose, service, PIPELINE[service], STEP_TIMEOUT)
        health[service] = round(time.monotonic() - t_up, 1)
    say(f"up: {', '.join(f'{k} {v:.0f} s' for k, v in health.items())} after `up`")

    # --- the demo's stream, produced from the host, with its ledger ----------------------
    start = (datetime.now(UTC) - timedelta(days=3)).replace(
        hour=8, minute=0, second=0, microsecond=0
    )
    result = simulate(
        SimulationConfig(
            count=RECEIPTS, seed=SEED, start=start, stores=STORES, faults=FaultConfig(**FAULTS)
        )
    )
    mixed = add_conflicts(result.messages, 0.005, SEED)
    summary = summary_with(result.summary, mixed.faults)
    summary["topic"] = host.topics.transactions
    book = tmp_path / "ledger"
    ledger.write(book, result.receipts, [*result.faults, *mixed.faults], summary)
    messages = mixed.messages
    half = len(messages) // 2
    sent = produce(messages[:half], host.bootstrap_servers, host.topics.transactions, quiet=True)
    say(f"produced the first {sent.acked:,} of {len(messages):,} messages ({RECEIPTS:,} receipts)")

    # The speed layer's health check wants a finished micro-batch: the stream's first.
    await_state(compose, "speed", "healthy", STEP_TIMEOUT)
    health["speed"] = round(time.monotonic() - t_up, 1)
    report.figures["healthy_after_up_s"] = health
    say(f"speed: healthy {health['speed']:.0f} s after `up`")

    # --- `compose restart speed` while the second half is produced ----------------------
    second: dict[str, Any] = {}

    def send_rest() -> None:
        second["stats"] = produce(
            messages[half:],
            host.bootstrap_servers,
            host.topics.transactions,
            quiet=True,
            rate=400.0,
        )

    producer = threading.Thread(target=send_rest, name="second-half")
    producer.start()
    before = compose.state("speed")
    t_restart = time.monotonic()
    compose.run("restart", "speed")
    restart_s = time.monotonic() - t_restart
    producer.join(timeout=STEP_TIMEOUT)
    assert not producer.is_alive(), "the second half was not produced in time"
    after = compose.state("speed")
    assert before is not None and after is not None and after.started_at != before.started_at
    more = second["stats"].acked
    say(f"restart speed: {restart_s:.0f} s (stop + start) while {more:,} more were produced")
    assert sent.acked + second["stats"].acked == len(messages)

    # --- everything catches up: speed (checkpoints in the volume), alerts and its sink ----
    data_dir = compose.volume_dir("pos-data") / "pipeline"
    host = host.with_overrides(data_dir=data_dir)
    t_catch = time.monotonic()
    steps.await_or_fail(
        lambda: steps.speed_caught_up(host), STEP_TIMEOUT, "the speed layer to catch up"
    )
    steps.await_or_fail(
        lambda: steps.group_caught_up(host, host.alerts.group_id, host.topics.transactions),
        STEP_TIMEOUT, "the alerts processor to catch up",
    )  # fmt: skip
    steps.await_or_fail(
        lambda: steps.group_caught_up(host, host.alerts.sink_group_id, host.topics.alerts),
        STEP_TIMEOUT, "the alerts sink to catch up",
    )  # fmt: skip
    steps.await_or_fail(
        lambda: steps.group_caught_up(host, host.receipts.group_id, host.topics.transactions),
        STEP_TIMEOUT, "the deduplicated topic's processor to catch up",
    )  # fmt: skip
    after_restart = await_state(compose, "speed", "healthy", STEP_TIMEOUT)
    report.figures["restart"] = {
        "restart_s": round(restart_s, 1),
        "caught_up_after_restart_s": round(time.monotonic() - t_catch, 1),
        "healthy_again_s": round(after_restart, 1),
    }
    say(f"caught up {time.monotonic() - t_catch:.0f} s after the restart; speed healthy again")

    # --- the batch layer: a one-off container of the same image and volume ---------------
    # Whole UTC days, so that every day of the stream is final once the batch commits
    # (a day is final when the batch answered all of its windows).
    happened = [datetime.fromisoformat(r["happened_at"]).astimezone(UTC) for r in result.receipts]
    first_hour = min(happened).replace(hour=0, minute=0, second=0, microsecond=0)
    end_hour = max(happened).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    t_batch = time.monotonic()
    batch = compose.run(
        "--profile", "tools", "run", "--rm", "batch", "pos-batch", "run", "--quality",
        "--start", first_hour.isoformat(), "--end", end_hour.isoformat(),
        check=False, timeout=STEP_TIMEOUT,
    )  # fmt: skip
    (compose.log_dir / "batch.log").write_text(batch.stdout + batch.stderr)
    assert batch.returncode == 0, (
        f"pos-batch run exited {batch.returncode}:\n{batch.stderr[-3000:]}"
    )
    report.figures["batch_s"] = round(time.monotonic() - t_batch, 1)
    say(f"batch: pos-batch run --quality in a container: {report.figures['batch_s']:.0f} s")

    # --- serving: the container's HTTP API against the ledger's own sums -----------------
    assert _get_json("/health")  # answers (200) with the pipeline's state
    totals = _ledger_day_totals(book)
    (store, day), (count, revenue) = max(totals.items(), key=lambda kv: kv[1][0])
    answer = _get_json(f"/stores/{store}/days?first={day}&last={day}")
    assert len(answer) == 1
    assert (answer[0]["receipt_count"], Decimal(str(answer[0]["revenue"]))) == (count, revenue)
    assert answer[0]["final"] is True
    report.figures["served"] = {
        "store": store,
        "day": day,
        "receipts": count,
        "revenue": str(revenue),
    }
    say(f"serving (container): store {store} on {day}: {count} receipts, {revenue}, final")

    # --- the audit: every view against the ledger ---------------------------------------
    audit_json = compose.log_dir / "audit.json"
    env = steps.env_with({
        "POS_CASSANDRA_KEYSPACE": host.cassandra.keyspace,
        "POS_TOPIC_TRANSACTIONS": host.topics.transactions,
        "POS_TOPIC_ALERTS": host.topics.alerts,
        "POS_TOPIC_RECEIPTS": host.topics.receipts,
        "POS_TOPIC_DEAD_LETTERS": host.topics.dead_letters,
        "POS_DATA_DIR": str(data_dir),
    })  # fmt: skip
    code = steps.audit(book, audit_json, env, compose.log_dir / "audit.log", STEP_TIMEOUT)
    verdict = json.loads(audit_json.read_text())
    views = verdict["views"]
    exact = sorted(name for name, v in views.items() if v.get("exact"))
    report.figures["audit"] = {
        "exit": code,
        "clean": verdict["clean"],
        "views": len(views),
        "exact": exact,
    }
    say(f"audit: {'EXACT' if code == 0 else 'DISCREPANCIES'}, {len(exact)} of {len(views)} views "
        f"exact (report {audit_json})")  # fmt: skip
    assert code == 0, json.dumps(verdict, indent=2)[:4000]
    report.figures["total_s"] = round(time.monotonic() - report.t0, 1)
