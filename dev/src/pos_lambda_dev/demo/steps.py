"""Shared shell of `pos-demo` and `pos-chaos`: progress lines, logged subprocesses, and
the few Kafka and Cassandra operations both need (reset a namespace, offsets, counts).

Every subprocess writes to its own log file, so the terminal shows progress lines only;
every wait is `pos_lambda_dev.runtime.process.wait_for` with a timeout and a message that
says what did not happen.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.cassandra_client import OpenSession
from pos_lambda.adapters.kafka_clients import ConfluentClients
from pos_lambda.adapters.service import wait_for
from pos_lambda.settings import Settings

VENV_BIN = Path(sys.executable).parent


class StepFailed(RuntimeError):
    """A step of the demo or the chaos run failed; the message says which and where."""


class Progress:
    """`[mm:ss] text` lines on stdout, flushed at once."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def __call__(self, text: str) -> None:
        m, s = divmod(int(self.elapsed), 60)
        print(f"[{m:02d}:{s:02d}] {text}", flush=True)


def log_to_file(path: Path) -> None:
    """Send this process's logging (drivers, libraries) to a file, not the terminal."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def interrupt_on_sigterm() -> None:
    """Treat SIGTERM (`kill`, a CI timeout, a process manager) like Ctrl-C: the run's
    `finally` then stops what it started instead of leaving it running."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def env_with(overrides: Mapping[str, str]) -> dict[str, str]:
    """This process's environment plus POS_* overrides (and the venv first on PATH)."""
    env = {**os.environ, **overrides}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}"
    return env


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return f"(no log at {path})"


def run_logged(
    argv: list[str], env: Mapping[str, str], log: Path, timeout: float, what: str
) -> int:
    """Run to completion with output appended to `log`; the exit code (negative: signal)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise StepFailed(
                f"{what}: not done after {timeout:.0f} s (stopped); log {log}:\n{tail(log)}"
            ) from None
        except BaseException:
            kill_group(proc)
            raise


def start_logged(argv: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start in its own process group with output appended to `log`."""
    log.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab")  # noqa: SIM115 - the child holds it; closed when we drop the Popen
    out.write(f"\n$ {' '.join(argv)}\n".encode())
    out.flush()
    return subprocess.Popen(
        argv, env=dict(env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
    )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def stop_gracefully(proc: subprocess.Popen[bytes], timeout: float = 120) -> int:
    """SIGTERM to the command itself (the pos-* commands stop cleanly on it; `pos-speed`
    forwards it to its driver, which stops its queries before its JVM: a SIGTERM to the
    whole group would stop the JVM under it), then SIGKILL to the group after `timeout`."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
    return proc.returncode if proc.returncode is not None else -1


def children(pid: int) -> list[int]:
    """Direct children of `pid` (from /proc)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{task}/children") as f:
                found += [int(c) for c in f.read().split()]
    return found


def driver_jobs(pid: int) -> str | None:
    """The jobs a `pos-speed run` driver process runs ("views", "archiver,views"), or
    None if `pid` is no driver (a standby that waits is none: `standby_jobs`)."""
    role = _speed_role(pid)
    return role[1] if role is not None and role[0] == "driver" else None


def standby_jobs(pid: int) -> str | None:
    """The jobs a `pos-speed run` standby (POS_SPEED_STANDBY) would take over, while it
    waits for its driver to die; None if `pid` is no waiting standby."""
    role = _speed_role(pid)
    return role[1] if role is not None and role[0] == "standby" else None


def _speed_role(pid: int) -> tuple[str, str] | None:
    """("driver" or "standby", its jobs) of a `pos-speed run` child, from /proc. The last
    --jobs counts: the supervisor appends one. A standby's command line says --standby
    for good; once it takes over it names itself TOOK_OVER_NAME (/proc/PID/comm)."""
    from pos_lambda.speed_layer.supervisor import TOOK_OVER_NAME

    with contextlib.suppress(OSError), open(f"/proc/{pid}/cmdline", "rb") as f:
        argv = f.read().decode().split("\0")
        if "--driver" in argv:
            jobs = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--jobs"]
            which = jobs[-1] if jobs else "archiver,views"
            if "--standby" in argv:
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                return ("driver" if name == TOOK_OVER_NAME else "standby", which)
            return ("driver", which)
    return None


def await_or_fail(condition: Any, timeout: float, what: str, interval: float = 1.0) -> None:
    if not wait_for(condition, timeout=timeout, interval=interval):
        raise StepFailed(f"timed out after {timeout:.0f} s waiting for {what}")


# --- Kafka -----------------------------------------------------------------------


def reset_topics(settings: Settings, topics: dict[str, int], groups: list[str]) -> None:
    """Delete these topics (and these consumer groups) if they exist; create them anew."""
    from pos_lambda.adapters import kafka_admin

    admin = ConfluentClients.from_settings(settings).admin()
    existing = kafka_admin.existing_topics(
        settings.bootstrap_servers, security=settings.kafka.security_config
    )
    doomed = [t for t in topics if t in existing]
    if doomed:
        for future in admin.delete_topics(doomed, operation_timeout=60).values():
            future.result()

        def gone() -> bool:
            left = kafka_admin.existing_topics(
                settings.bootstrap_servers, security=settings.kafka.security_config
            )
            return not set(doomed) & left

        await_or_fail(gone, 120, f"Kafka to delete {', '.join(doomed)}", 0.5)
    if groups:
        for future in admin.delete_consumer_groups(groups, request_timeout=30).values():
            with contextlib.suppress(Exception):  # a group that never existed
                future.result()

    def created() -> bool:
        try:
            schema_apply.create_topics(settings, topics)
            return True
        except Exception:  # the deletion is still settling in the controller
            return False

    await_or_fail(created, 120, f"Kafka to create {', '.join(topics)}", 1.0)


def end_offsets(settings: Settings, topic: str) -> dict[int, int]:
    """Partition -> high watermark."""
    from confluent_kafka import TopicPartition

    consumer = ConfluentClients.from_settings(settings).offsets_reader("pos-demo-offsets")
    try:
        md = consumer.list_topics(topic, timeout=30)
        out = {}
        for p in sorted(md.topics[topic].partitions):
            out[p] = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
        return out
    finally:
        consumer.close()


def committed(settings: Settings, group: str, topic: str) -> dict[int, int]:
    """Partition -> the group's committed offset (read_committed; -1001 counts as 0)."""
    from confluent_kafka import TopicPartition

    consumer = ConfluentClients.from_settings(settings).offsets_reader(group)
    try:
        md = consumer.list_topics(topic, timeout=30)
        tps = [TopicPartition(topic, p) for p in sorted(md.topics[topic].partitions)]
        return {tp.partition: max(tp.offset, 0) for tp in consumer.committed(tps, timeout=30)}
    finally:
        consumer.close()


def group_caught_up(settings: Settings, group: str, topic: str) -> bool:
    try:
        return committed(settings, group, topic) == end_offsets(settings, topic)
    except Exception:  # coordinator moving, broker restarting: not yet
        return False


# --- Spark checkpoints --------------------------------------------------------------


def checkpoint_offsets(checkpoint: Path, topic: str) -> dict[int, int] | None:
    """The offsets the query's newest *committed* micro-batch read up to, or None."""
    import json

    commits = checkpoint / "commits"
    try:
        done = sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit())
    except FileNotFoundError:
        return None
    if not done:
        return None
    try:
        lines = (checkpoint / "offsets" / str(done[-1])).read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines[2:]:  # version, metadata, then one line per source
        doc = json.loads(line)
        if isinstance(doc, dict) and topic in doc:
            return {int(p): int(o) for p, o in doc[topic].items()}
    return None


def speed_caught_up(settings: Settings, jobs: tuple[str, ...] = ("archiver", "views")) -> bool:
    """Every speed-layer query has committed a micro-batch up to the topic's end."""
    try:
        end = end_offsets(settings, settings.topics.transactions)
    except Exception:
        return False
    for job in jobs:
        got = checkpoint_offsets(settings.checkpoint_dir / job, settings.topics.transactions)
        if got is None or any(got.get(p, 0) < o for p, o in end.items()):
            return False
    return True


# --- Cassandra ----------------------------------------------------------------------


def cql_session(settings: Settings) -> OpenSession:
    """A session in the pipeline's keyspace, for a `with` block (the Cassandra port)."""
    from pos_lambda.adapters import cassandra_client

    return cassandra_client.open_session(settings)


def reset_keyspace(settings: Settings) -> None:
    """Drop the keyspace if it exists, then create it and its tables anew."""
    from pos_lambda.adapters import cassandra_client

    with cassandra_client.open_session(settings, keyspace=False, writes=True) as session:
        session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra.keyspace}", timeout=120)
    schema_apply.apply_cql(settings)


def reset_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True, exist_ok=True)


def count_rows(session: Any, table: str) -> int:
    return int(session.execute(f"SELECT COUNT(*) FROM {table}", timeout=120).one()[0])


def speed_totals(session: Any) -> dict[str, float]:
    """Sums over the views query's recorded micro-batches (a replayed batch id is one row)."""
    from pos_lambda.schemas import cql

    rows = list(
        session.execute(
            f"SELECT * FROM {cql.SPEED_PROGRESS_TABLE} WHERE query_name = %s",
            (cql.SPEED_QUERY_OF_JOB["views"],),
            timeout=60,
        )
    )
    keys = ("valid_rows", "invalid_rows", "resends_absorbed", "conflicts", "late_receipts",
            "beyond_lateness_bound", "duration_ms")  # fmt: skip
    out: dict[str, float] = {k: float(sum(getattr(r, k) or 0 for r in rows)) for k in keys}
    out["micro_batches"] = float(len(rows))
    return out


def audit(ledger: Path, report: Path, env: Mapping[str, str], log: Path, timeout: float) -> int:
    """`pos-audit --ledger DIR --json PATH`; its exit code (0 clean, 1 discrepancy)."""
    exe = VENV_BIN / "pos-audit"
    if not exe.exists():
        raise StepFailed(
            f"the auditor `pos-audit` is not installed in {VENV_BIN.parent}: run "
            "`make setup` (or `.venv/bin/pip install --no-deps -e .`)"
        )
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    code = run_logged(
        [str(exe), "--ledger", str(ledger), "--json", str(report)], env, log, timeout, "audit"
    )
    if code not in (0, 1) or not report.exists():
        raise StepFailed(f"pos-audit exited {code} without a report; log {log}:\n{tail(log)}")
    return code
