"""The speed layer's views query vs the plain Python consumer, same topic, same run.

    python bench/speed_vs_plain.py [--count 50000] [--rounds 2]

Produces one topic of simulated receipts with faults (resends, malformed, late;
the producer's ledger beside it), then alternates, `--rounds` times:
  - the plain consumer (bench/plain_consumer.py, the alternative a user might write),
  - `pos-speed run --available-now --jobs views` (one micro-batch),
each into a fresh keyspace of its own, and checks each keyspace against the ledger:
a run counts only when its views are exact. Reports events/s of each (the plain
consumer from its first message to its last write; the speed layer's processed
rows/s of its micro-batch, from its progress) and the ratio speed/plain. Needs
`make up`; drops its keyspaces at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, datetime
from pathlib import Path

from plain_consumer import check_ledger  # bench/, beside this script

from infra import cassandra_client, schema_apply
from infra.settings import PROJECT_ROOT, Settings, load_settings
from producer import ledger as ledger_files
from producer.kafka_sink import produce
from producer.simulation import FaultConfig, SimulationConfig, simulate


def _env(settings: Settings, keyspace: str, data: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "POS_TOPIC_TRANSACTIONS": settings.topic_transactions,
        "POS_CASSANDRA_KEYSPACE": keyspace,
        "POS_DATA_DIR": str(data),
        "POS_SPEED_MAX_OFFSETS_PER_TRIGGER": "1000000",  # the whole backlog, one batch
    }


def run_plain(settings: Settings, keyspace: str, ledger: Path) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "bench/plain_consumer.py", "--topic", settings.topic_transactions,
         "--keyspace", keyspace, "--ledger", str(ledger)],
        env=_env(settings, keyspace, Path(tempfile.gettempdir())), cwd=PROJECT_ROOT,
        capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"plain consumer failed:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def run_speed(settings: Settings, keyspace: str, ledger: Path) -> dict[str, object]:
    data = Path(tempfile.mkdtemp(prefix="bench-svp-"))
    env = _env(settings, keyspace, data)
    try:
        schema_apply.apply_cql(settings, keyspace)
        done = subprocess.run(
            [sys.executable, "-m", "speed_layer.cli", "run", "--available-now", "--jobs",
             "views"],
            env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise SystemExit(f"pos-speed failed:\n{done.stderr[-3000:]}")
        status = json.loads((data / "speed_status.json").read_text())["pos-speed-views"]
    finally:
        shutil.rmtree(data, ignore_errors=True)
    problems = check_ledger(settings, keyspace, ledger)
    return {
        "messages": status.get("input_rows"),
        "events_per_second": float(status["processed_rows_per_second"]),
        "seconds": status.get("duration_ms", 0) / 1000,
        "exact": not problems,
        "problems": problems,
    }


def drop_keyspaces(settings: Settings, keyspaces: list[str]) -> None:
    cluster = cassandra_client.cluster(settings, writes=True)
    session = cluster.connect()
    try:
        for ks in keyspaces:
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
    finally:
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--count", type=int, default=50_000, help="unique receipts")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    base = load_settings()
    topic = f"bench.svp.{uuid.uuid4().hex[:8]}"
    schema_apply.create_topics(base, {topic: base.topic_partitions})
    settings = base.model_copy(update={"topic_transactions": topic})
    faults = FaultConfig(resend_rate=0.006, malformed_rate=0.005, late_rate=0.02,
                         late_max_delay_s=7200, burst_rate=0.02)  # fmt: skip
    result = simulate(SimulationConfig(count=args.count, seed=3, faults=faults,
                                       start=datetime(2026, 3, 2, 8, tzinfo=UTC)))  # fmt: skip
    ledger = Path(tempfile.mkdtemp(prefix="bench-svp-ledger-"))
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    produce(result.messages, settings.bootstrap_servers, topic, quiet=True)
    summary = result.summary
    print(f"{len(result.messages)} messages in {topic} ({summary.get('faults', summary)})",
          flush=True)  # fmt: skip

    runs: dict[str, list[dict[str, object]]] = {"plain": [], "speed": []}
    keyspaces: list[str] = []
    try:
        for rnd in range(args.rounds):
            for name, run in (("plain", run_plain), ("speed", run_speed)):
                ks = f"bench_svp_{name}_{uuid.uuid4().hex[:6]}"
                keyspaces.append(ks)
                out = run(settings, ks, ledger)
                runs[name].append(out)
                verdict = "exact" if out["exact"] else f"NOT EXACT {out['problems']}"
                print(f"round {rnd + 1}: {name}: {float(out['events_per_second']):,.0f} "  # type: ignore[arg-type]
                      f"events/s ({verdict})", flush=True)  # fmt: skip
    finally:
        drop_keyspaces(settings, keyspaces)
        shutil.rmtree(ledger, ignore_errors=True)
    exact = all(r["exact"] for rs in runs.values() for r in rs)
    rates = {n: [float(r["events_per_second"]) for r in rs] for n, rs in runs.items()}  # type: ignore[arg-type]
    medians = {n: statistics.median(r) for n, r in rates.items()}
    ratio = medians["speed"] / medians["plain"]
    print(f"median: plain {medians['plain']:,.0f} events/s, speed (views query) "
          f"{medians['speed']:,.0f} events/s: speed/plain = {ratio:.2f}"
          + ("" if exact else "  (NOT EXACT: the numbers do not count)"))  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps({"messages": len(result.messages), "summary": summary,
                                         "runs": runs, "ratio": ratio, "exact": exact},
                                        indent=2, default=str))  # fmt: skip


if __name__ == "__main__":
    main()
