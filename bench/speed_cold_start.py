"""The speed layer's fixed costs as a user meets them: from a cold start, any keys, one-shot.

    python -m bench.speed_cold_start [--parts latency,first-batch,one-shot]
                                     [--seconds 120] [--rate 10] [--one-shot-count 50000]
                                     [--rounds 2] [--json PATH]

Each part on a topic, a keyspace and a data dir of its own; nothing is warm when a part
starts but the services (Kafka, Cassandra):

1. **latency** (the shipped defaults, as `make speed` runs them): start `pos-speed run`
   (both queries, no flag), await the line it logs once ready ("speed layer ready in
   N s": every driver warmed up and its query started), report the time from the
   process's start to it, then at once produce `--rate` receipts/s for `--seconds` s and
   measure every receipt's produce-to-visible latency (as bench/speed_latency.py
   defines it: its broker ack to the first poll of agg_15m_speed showing it). Three
   variants: receipts of 20 stores; each receipt from a store never seen before (a new
   partition of every table per receipt); 20 stores with the warm-up off
   (POS_SPEED_WARM_UP=false: what the warm-up buys). Goals: p99 over the whole run
   <= 2 s and <= 2x the views trigger interval; new-store p99 <= 1.25x the 20-store p99.
2. **first-batch**: 100 receipts wait in Kafka; `pos-speed run --jobs views` starts and
   its first micro-batch takes them (on a driver that has only warmed up); then, three
   times, 100 more receipts of the same stores (new receipt numbers) are produced in one
   Kafka transaction (the query reads committed records only: one micro-batch takes
   them all) and their micro-batch is timed, warm. Each with the warm-up on (shipped)
   and off. Goal: cold first / warm median <= 2. Durations are Spark's
   triggerExecution per micro-batch, from `speed_progress`.
3. **one-shot**: `--one-shot-count` simulated receipts with faults (bench/faulted_topic.py)
   taken by `pos-speed run --available-now --jobs views` in one micro-batch of a fresh
   JVM (its processed rows/s: from the micro-batch's start, so the JVM's cold code is
   in it; also the messages over the whole process's time, JVM start included) against
   the plain Python consumer (bench/plain_consumer.py) on the same topic, `--rounds`
   rounds alternated. Goal >= 2. Each run's views checked against the producer's ledger.
   Beside it, each side's CPU over its measured span (bench/cpu_meter.py: all cores,
   Cassandra's share too) against the most the goal allows on this machine's cores.

Needs `make up`; drops its keyspaces and topics at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench import harness, results
from bench.cpu_meter import CpuMeter
from bench.harness import QUERY_OF_JOB, ProgressReader, SpeedLayer, drop, progress_rows
from bench.speed_latency import (
    Planned,
    Poller,
    Sent,
    TimedProducer,
    WindowKey,
    bodies,
    latencies,
    percentile,
    summarise_batches,
)
from bench.speed_vs_plain import cpu_figures, cpu_per_1k, cpu_summary, run_plain, run_speed
from pos_lambda.adapters import schema_apply
from pos_lambda.adapters.service import wait_for
from pos_lambda.producer import ledger as ledger_files
from pos_lambda.producer.kafka_sink import produce, producer_config
from pos_lambda.settings import Settings, load_settings

VIEWS = QUERY_OF_JOB["views"]
READY = "speed layer ready in "
P99_GOAL_S = 2.0
NEW_STORE_GOAL = 1.25
FIRST_BATCH_GOAL = 2.0
ONE_SHOT_GOAL = 2.0
FIRST_BATCH_ROWS = 100
NEW_STORES_FROM = 1_000_000  # store ids of the new-store variant (the simulation's: 1-20)


def new_store_bodies(seed: int) -> Iterator[Planned]:
    """The simulated receipts of `bodies`, each from a store never seen before."""
    for i, p in enumerate(bodies(seed)):
        store = NEW_STORES_FROM + i
        device = int(p.body["vendor_fiscal_module"])
        yield Planned(f"{store}:{device}".encode(), {**p.body, "operation_id": store}, store)


# --- 1. latency from a cold start ---------------------------------------------------------


def latency_run(
    base: Settings, name: str, planned: Iterator[Planned], env_extra: dict[str, str],
    args: argparse.Namespace, log: Path,
) -> dict[str, Any]:  # fmt: skip
    """One cold start of `pos-speed run` with the shipped defaults, then the load."""
    topic, ks = f"bench.cold.{uuid.uuid4().hex[:8]}", f"bench_cold_{uuid.uuid4().hex[:8]}"
    data = Path(tempfile.mkdtemp(prefix="bench-cold-"))
    schema_apply.create_topics(base, {topic: base.topics.partitions})
    schema_apply.apply_cql(base, ks)
    sent = Sent()
    index: dict[bytes, int] = {}

    def on_ack(value: bytes) -> None:
        sent.acked_at[index[value]] = time.time()

    producer = TimedProducer(
        producer_config(base.bootstrap_servers, security=base.kafka.security_config), on_ack
    )
    poller = Poller(base, ks, args.poll_ms / 1000)

    def on_new(position: int, value: bytes, wkey: WindowKey) -> None:
        index[value] = position
        poller.await_level(wkey, sent.per_window.get(wkey, 0) + 1)

    speed = None
    try:
        t0 = time.monotonic()
        speed = SpeedLayer(harness.pipeline_env(ks, data, topic, extra=env_extra), [], log)
        if not wait_for(lambda: _ready(speed), timeout=args.start_timeout, interval=0.1):
            raise RuntimeError(
                f"pos-speed not ready in {args.start_timeout:.0f} s:\n{speed.tail()}"
            )
        ready_s = time.monotonic() - t0
        print(f"  {name}: ready {ready_s:.1f} s after its start; producing {args.rate:g}/s "
              f"for {args.seconds:g} s", flush=True)  # fmt: skip
        first_at = time.time() + 0.05
        stream = sent.stamp(planned, first_at, args.rate,
                            lambda at: at < first_at + args.seconds, on_new)  # fmt: skip
        produce(stream, base.bootstrap_servers, topic, rate=args.rate, quiet=True,
                producer=producer)  # fmt: skip
        all_in = wait_for(lambda: poller.all_visible(sent), timeout=args.drain_timeout,
                          interval=0.1)  # fmt: skip
        drained_at = time.time()
    finally:
        poller.close()
        if speed is not None:
            speed.stop()
        shutil.rmtree(data, ignore_errors=True)
    measured = latencies(sent, poller, range(len(sent.windows)))
    exact = all(poller.counts.get(w) == n for w, n in sent.per_window.items())
    progress = progress_rows(base, ks)
    out: dict[str, Any] = {
        "variant": name,
        "topic": topic,
        "keyspace": ks,
        "ready_s": round(ready_s, 1),
        "receipts": len(measured),
        "store_days": len({(op, ws.date()) for op, ws in sent.per_window}),
        "p50_s": round(percentile(measured, 50), 3),
        "p99_s": round(percentile(measured, 99), 3),
        "max_s": round(max(measured), 3),
        "first_receipt_s": round(measured[0], 3),
        "first_10_s_p99_s": round(percentile(_first(sent, measured, first_at, 10), 99), 3),
        "not_visible": sum(1 for x in measured if math.isinf(x)),
        "all_visible": all_in,
        "exact_counts": exact,
        "batches": summarise_batches(progress, first_at, drained_at),
    }
    print(f"  {name}: p50 {out['p50_s']} s, p99 {out['p99_s']} s, max {out['max_s']} s over "
          f"{len(measured)} receipts (first 10 s: p99 {out['first_10_s_p99_s']} s); counts "
          f"{'exact' if exact else 'NOT exact'}", flush=True)  # fmt: skip
    for query, b in out["batches"].items():
        print(f"    {query}: {b['batches']} micro-batches, p50 {b['duration_ms_p50']} ms, max "
              f"{b['duration_ms_max']} ms, first {b['first_batch_ms']} ms", flush=True)  # fmt: skip
    return out


def _ready(speed: SpeedLayer) -> bool:
    if speed.proc.poll() is not None:
        raise RuntimeError(f"pos-speed exited ({speed.proc.returncode}):\n{speed.tail()}")
    return speed.logged(READY)


def _first(sent: Sent, values: list[float], first_at: float, seconds: float) -> list[float]:
    """The latencies of the receipts scheduled in the first `seconds` of the load."""
    return [v for v, at in zip(values, sent.scheduled, strict=True) if at < first_at + seconds]


# --- 2. the first micro-batch against warm ones -------------------------------------------


def _receipts(planned: Iterator[Planned], n: int, now: datetime) -> list[tuple[bytes, bytes]]:
    return [
        (p.key or b"", json.dumps({**p.body, "happened_at": now.isoformat()}).encode())
        for p, _ in zip(planned, range(n), strict=False)
    ]


def _produce_in_one_transaction(
    base: Settings, topic: str, records: list[tuple[bytes, bytes]]
) -> None:
    """All of `records` visible to read_committed consumers at once (one micro-batch)."""
    producer = Producer({
        **producer_config(base.bootstrap_servers, security=base.kafka.security_config),
        "transactional.id": f"bench-cold-{uuid.uuid4().hex[:8]}",
    })  # fmt: skip
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value in records:
        producer.produce(topic, value=value, key=key)
    producer.commit_transaction(30)


def first_batch_run(
    base: Settings, warm_up: bool, args: argparse.Namespace, log: Path
) -> dict[str, Any]:
    topic, ks = f"bench.first.{uuid.uuid4().hex[:8]}", f"bench_first_{uuid.uuid4().hex[:8]}"
    data = Path(tempfile.mkdtemp(prefix="bench-first-"))
    schema_apply.create_topics(base, {topic: base.topics.partitions})
    schema_apply.apply_cql(base, ks)
    planned = bodies(seed=17)
    _produce_in_one_transaction(
        base, topic, _receipts(planned, FIRST_BATCH_ROWS, datetime.now(UTC))
    )
    env = harness.pipeline_env(ks, data, topic, extra={"POS_SPEED_WARM_UP": str(warm_up).lower()})
    speed = SpeedLayer(env, ["--jobs", "views"], log)
    durations: list[int] = []
    try:
        with ProgressReader(base, ks) as reader:
            for batch in range(1 + args.warm_batches):
                if batch:
                    _produce_in_one_transaction(
                        base, topic, _receipts(planned, FIRST_BATCH_ROWS, datetime.now(UTC))
                    )
                row = _await_batch_with_rows(reader, speed, args.start_timeout)
                durations.append(int(row["duration_ms"]))
    finally:
        speed.stop()
        shutil.rmtree(data, ignore_errors=True)
        drop(base, [ks], [topic])
    cold, warm = durations[0], statistics.median(durations[1:])
    label = "on" if warm_up else "off"
    print(f"  first micro-batch, warm-up {label}: {cold} ms for {FIRST_BATCH_ROWS} rows; warm "
          f"{durations[1:]} ms (median {warm:.0f}): {cold / warm:.2f}x", flush=True)  # fmt: skip
    return {"warm_up": warm_up, "first_ms": cold, "warm_ms": durations[1:], "warm_median_ms": warm}


def _await_batch_with_rows(
    reader: ProgressReader, speed: SpeedLayer, timeout: float
) -> dict[str, Any]:
    """The next micro-batch of the views query that took rows (its duration recorded)."""
    seen = {r["batch_id"] for r in reader.rows() if r["query_name"] == VIEWS}
    found: list[dict[str, Any]] = []

    def done() -> bool:
        if speed.proc.poll() is not None:
            raise RuntimeError(f"pos-speed exited:\n{speed.tail()}")
        found[:] = [
            r for r in reader.rows()
            if r["query_name"] == VIEWS and r["batch_id"] not in seen
            and (r["input_rows"] or 0) > 0 and r["duration_ms"] is not None
        ]  # fmt: skip
        return bool(found)

    if not wait_for(done, timeout=timeout, interval=0.2):
        raise RuntimeError(f"no micro-batch in {timeout:.0f} s:\n{speed.tail()}")
    row = min(found, key=lambda r: r["batch_id"])
    if row["input_rows"] != FIRST_BATCH_ROWS:
        raise RuntimeError(f"a micro-batch of {row['input_rows']} rows, not {FIRST_BATCH_ROWS}")
    return row


# --- 3. one-shot against the plain consumer -----------------------------------------------


def one_shot(base: Settings, args: argparse.Namespace) -> dict[str, Any]:
    from bench.faulted_topic import produce_faulted_topic

    settings, result = produce_faulted_topic(base, "bench.oneshot", args.one_shot_count)
    ledger = Path(tempfile.mkdtemp(prefix="bench-oneshot-ledger-"))
    ledger_files.write(ledger, result.receipts, result.faults, result.summary)
    runs: dict[str, list[dict[str, Any]]] = {"plain": [], "views": []}
    keyspaces: list[str] = []
    # The views query alone, one micro-batch of a fresh JVM (bench/speed_vs_plain.py's).
    contenders: dict[str, Callable[[Settings, str, Path], dict[str, Any]]] = {
        "plain": run_plain,
        "views": partial(run_speed, jobs="views"),
    }
    try:
        # The machine's CPU and the local services' own over each contender's measured
        # span: what the goal allows on these cores against what each side spends.
        with CpuMeter(harness.service_pids(settings)) as meter:
            for rnd, (name, run) in harness.alternate(args.rounds, contenders.items(), True):
                ks = f"bench_oneshot_{name}_{uuid.uuid4().hex[:6]}"
                keyspaces.append(ks)
                out = run(settings, ks, ledger)
                out["cpu_core_ms_per_1k"] = cpu_per_1k(meter, out)
                runs[name].append(out)
                print(f"  one-shot round {rnd}: {name} {float(out['events_per_second']):,.0f} "
                      f"events/s ({'exact' if out['exact'] else 'NOT EXACT'}); "
                      f"{cpu_summary(out['cpu_core_ms_per_1k'])}", flush=True)  # fmt: skip
    finally:
        drop(base, keyspaces, [settings.topics.transactions])
        shutil.rmtree(ledger, ignore_errors=True)
    return {"messages": len(result.messages), "runs": runs}


# --- the report -----------------------------------------------------------------------------


def figures(out: dict[str, Any], trigger_s: float) -> list[results.Figure]:
    figs: list[results.Figure] = []
    lat = {r["variant"]: r for r in out.get("latency", [])}
    trigger = f"2x the views trigger interval ({2 * trigger_s:g} s)"
    for name, r in lat.items():
        exact = r["exact_counts"] and r["all_visible"]
        p99 = r["p99_s"] if exact else math.inf
        figs += [
            results.vs_floor(f"p99 produce-to-visible from a cold start, {name}", p99, "s",
                             trigger, 2 * trigger_s,
                             results.Goal("<=", 1.0, "issue 49: p99 <= 2x the trigger")),
            results.baseline(f"p99 produce-to-visible from a cold start, {name} (goal <= "
                             f"{P99_GOAL_S:g} s)", p99, "s"),
            results.baseline(f"p50 produce-to-visible from a cold start, {name}", r["p50_s"], "s"),
            results.baseline(f"process start to ready, {name}", r["ready_s"], "s"),
        ]  # fmt: skip
    if "20 stores" in lat and "a new store per receipt" in lat:
        new = lat["a new store per receipt"]["p99_s"]
        figs.append(results.vs_peer(
            "p99 from a cold start, a new store per receipt", new,
            "s", "20 stores", lat["20 stores"]["p99_s"],
            results.Goal("<=", NEW_STORE_GOAL, "issue 49: new-store p99 <= 1.25x 20-store p99"),
        ))  # fmt: skip
    if "20 stores" in lat and "20 stores, warm-up off" in lat:
        figs.append(results.vs_peer(
            "p99 from a cold start, 20 stores, warm-up on (shipped)", lat["20 stores"]["p99_s"],
            "s", "warm-up off", lat["20 stores, warm-up off"]["p99_s"],
        ))  # fmt: skip
    for r in out.get("first_batch", []):
        label = "warm-up on (shipped)" if r["warm_up"] else "warm-up off"
        figs.append(results.vs_peer(
            f"first views micro-batch of {FIRST_BATCH_ROWS} rows on a fresh driver, {label}",
            r["first_ms"], "ms", "warm micro-batch of the same rows", r["warm_median_ms"],
            results.Goal("<=", FIRST_BATCH_GOAL, "issue 49: cold first / warm <= 2")
            if r["warm_up"] else None,
        ))  # fmt: skip
    shot = out.get("one_shot")
    if shot:
        med = {n: statistics.median(float(r["events_per_second"]) for r in rs)
               for n, rs in shot["runs"].items()}  # fmt: skip
        process = statistics.median(
            int(r["messages"]) / float(r["process_s"]) for r in shot["runs"]["views"]
        )
        n = f"{shot['messages']:,} messages"
        figs += [
            results.vs_peer(f"one-shot views, {n}, from its micro-batch's start (cold JVM)",
                            med["views"], "events/s", "plain consumer", med["plain"],
                            results.Goal(">=", ONE_SHOT_GOAL, "issue 49: one-shot >= 2x plain")),
            results.vs_peer(f"one-shot views, {n}, from the process's start (JVM start too)",
                            process, "events/s", "plain consumer", med["plain"]),
        ]  # fmt: skip
        if all("cpu_core_ms_per_1k" in r for rs in shot["runs"].values() for r in rs):
            figs += cpu_figures(shot["runs"], med["plain"], {"views": ONE_SHOT_GOAL},
                                {"views": f"one-shot views, {n} (cold JVM)"},
                                "issue 49: one-shot >= 2x plain")  # fmt: skip
    return figs


def main() -> None:
    parser = harness.parser(__doc__, "speed_cold_start")
    parser.add_argument("--parts", default="latency,first-batch,one-shot")
    parser.add_argument("--seconds", type=float, default=120, help="the latency part's load (s)")
    parser.add_argument("--rate", type=float, default=10, help="receipts/s of the latency part")
    parser.add_argument("--poll-ms", type=float, default=100, help="agg_15m_speed poll interval")
    parser.add_argument("--drain-timeout", type=float, default=120)
    parser.add_argument("--start-timeout", type=float, default=300)
    parser.add_argument("--warm-batches", type=int, default=3,
                        help="warm micro-batches the first one is compared with")  # fmt: skip
    parser.add_argument(
        "--variants", default="", help="the latency part's variants to run, by name (default: all)"
    )
    parser.add_argument("--one-shot-count", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2, help="one-shot rounds")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"latency", "first-batch", "one-shot"}
    if unknown:
        parser.error(f"--parts: unknown {sorted(unknown)}")
    base = load_settings()
    log = Path(tempfile.gettempdir()) / "bench-speed-cold-start.log"
    print(f"pos-speed logs: {log}", flush=True)
    out: dict[str, Any] = {}
    created: list[tuple[str, str]] = []
    try:
        if "latency" in parts:
            variants = [
                ("20 stores", bodies(seed=11), {}),
                ("a new store per receipt", new_store_bodies(seed=11), {}),
                ("20 stores, warm-up off", bodies(seed=11), {"POS_SPEED_WARM_UP": "false"}),
            ]
            out["latency"] = []
            for name, planned, extra in variants:
                if args.variants and name not in args.variants.split(","):
                    continue
                r = latency_run(base, name, planned, extra, args, log)
                created.append((r["keyspace"], r["topic"]))
                out["latency"].append(r)
        if "first-batch" in parts:
            out["first_batch"] = [first_batch_run(base, w, args, log) for w in (True, False)]
        if "one-shot" in parts:
            out["one_shot"] = one_shot(base, args)
    finally:
        with contextlib.suppress(Exception):
            drop(base, [k for k, _ in created], [t for _, t in created])
    figs = figures(out, base.speed.trigger_seconds)
    for f in figs:
        ratio = f" ({f.ratio:.2f}x {f.reference})" if f.ratio is not None else ""
        print(f"{f.name}: {f.value:,.3g} {f.unit}{ratio}")
    results.write(args, "speed_cold_start", figs, runs=[out], notes=(
        "pos-speed run with the shipped defaults (views trigger "
        f"{base.speed.trigger_seconds:g} s), each part from a cold start"))  # fmt: skip


if __name__ == "__main__":
    main()
