"""Does a single KRaft broker lose records it acknowledged when it is killed (-9) and
restarted? A reproduction of issue 74 outside the pipeline.

It starts its OWN broker (never the project's: other ports, its own state under
--root), with the project's single-node server.properties
(`pos_lambda_dev.runtime.kafka_service.render_node_properties`, replication 1,
min.insync.replicas 1) and the jars under .cache/jars/kafka; creates a 4-partition
topic; runs an idempotent `acks=all` confluent-kafka producer with the project's
producer settings (`ConfluentClients.producer_config`: linger 5 ms, lz4) at a
chaos-like rate, keyed messages whose value carries a sequence number; and kills the
broker with SIGKILL at random moments, then starts it again, --kills times. After each
restart it flushes the producer and reads every partition back from offset 0, and
compares with the delivery reports: acknowledged (delivery callback without error, with
the partition/offset it reported), lost (acknowledged, absent from the topic),
duplicated (a sequence number held twice), moved (present, but not at the reported
offset). The broker logs `kafka.log`, `kafka.cluster.Partition`, `state.change.logger`
and the storage layer's log loading at INFO; the producer logs librdkafka's
`debug=eos,msg,protocol`; both under --root/logs. The summary goes to --json.

    .venv/bin/python -m bench.broker_kill_repro --kills 5
    .venv/bin/python -m bench.broker_kill_repro --kills 50 --timestamps event
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from pos_lambda.adapters.java import find_java17
from pos_lambda.adapters.kafka_clients import ConfluentClients
from pos_lambda.settings import Settings
from pos_lambda_dev.runtime import kafka_service

REPO = Path(__file__).resolve().parents[1]
TOPIC = "repro.transactions"

# Log lines that name a path to loss (or its absence), counted after the run.
SIGNATURES = {
    "producer.log": {
        "DUPSEQ (duplicate sequence answered, marked delivered)": "DUPSEQ",
        "ERRSEQ (sequence gap, epoch bump)": "ERRSEQ",
        "ERRPID (PID changed, messages failed)": "ERRPID",
        "UNKPID (unknown producer id)": "UNKPID",
        "possibly persisted errors": "MsgPossiblyPersisted",
        "fatal": "FATAL",
    },
    "broker.log": {
        "Truncating to offset": "Truncating to offset",
        "invalid bytes found at recovery": "Found invalid messages",
        "invalid tail truncated at recovery": "invalid bytes at the end of segment",
        "unclean start (no clean shutdown file)": "since no clean shutdown file was found",
        "leader RECOVERING -> RECOVERED": "was marked as RECOVERING",
        "become follower with no leader": "Current leader is -1",
    },
}


def count_signatures(logs: Path) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for name, patterns in SIGNATURES.items():
        counts = dict.fromkeys(patterns, 0)
        path = logs / name
        if path.exists():
            with open(path, errors="replace") as f:
                for line in f:
                    for label, needle in patterns.items():
                        if needle in line:
                            counts[label] += 1
        out[name] = counts
    return out


LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = STDOUT
logger.log.name = kafka.log
logger.log.level = INFO
logger.partition.name = kafka.cluster.Partition
logger.partition.level = INFO
logger.statechange.name = state.change.logger
logger.statechange.level = INFO
logger.storage.name = org.apache.kafka.storage.internals.log
logger.storage.level = INFO
logger.replica.name = kafka.server.ReplicaManager
logger.replica.level = INFO
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = INFO
"""


_SILENT = logging.getLogger("repro.silent")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


def quiet(bootstrap: str) -> dict[str, Any]:
    """A short-lived client's configuration whose connection errors are not printed."""
    return {"bootstrap.servers": bootstrap, "logger": _SILENT}


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Broker:
    """One KRaft node (broker + controller) of our own, from the project's settings."""

    def __init__(
        self, root: Path, port: int, controller_port: int, heap: str, extra_props: dict[str, str]
    ) -> None:
        self.root, self.port, self.heap = root, port, heap
        self.bootstrap = f"127.0.0.1:{port}"
        self.data = root / "data"
        self.logs = root / "logs"
        self.config = root / "server.properties"
        self.log4j = root / "log4j2.properties"
        self.settings = Settings()
        self.java = find_java17(self.settings.java_home)
        node = kafka_service.KafkaNode(
            1, "127.0.0.1", port, controller_port, f"1@127.0.0.1:{controller_port}", replicas=1
        )
        props = kafka_service.render_node_properties(node, self.data, 4)
        props += "".join(f"{k}={v}\n" for k, v in extra_props.items())
        self.properties = props
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def argv(self, main: list[str]) -> list[str]:
        return [
            str(self.java),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j2.configurationFile={self.log4j}",
            f"-Dkafka.logs.dir={self.logs}",
            "-cp",
            str(self.settings.jars_dir / "kafka" / "*"),
            *main,
        ]

    def format(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        self.logs.mkdir(parents=True)
        self.config.write_text(self.properties)
        self.log4j.write_text(LOG4J2)
        cid = kafka_service.new_cluster_id()
        done = subprocess.run(
            self.argv(
                [
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cid}",
                    f"--config={self.config}",
                ]
            ),
            capture_output=True,
            text=True,
            timeout=180,
        )
        if done.returncode != 0:
            raise SystemExit(f"formatting failed:\n{done.stdout}\n{done.stderr}")

    def start(self, timeout: float = 120.0) -> float:
        t0 = time.monotonic()
        self.starts += 1
        with open(self.logs / "broker.log", "ab") as log:
            log.write(f"\n===== REPRO start #{self.starts} at {time.time():.3f} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                self.argv(["kafka.Kafka", str(self.config)]),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        (self.root / "broker.pid").write_text(str(self.proc.pid))
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise SystemExit(f"broker exited ({self.proc.returncode}); see {self.logs}")
            if self.ready():
                return time.monotonic() - t0
            time.sleep(0.2)
        raise SystemExit("broker not ready in time")

    def ready(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                pass
        except OSError:
            return False
        try:
            md = AdminClient(quiet(self.bootstrap)).list_topics(timeout=2)
        except Exception:
            return False
        t = md.topics.get(TOPIC)
        if t is None:  # before the topic exists: metadata answering is enough
            return True
        return t.error is None and all(p.leader == 1 for p in t.partitions.values())

    def kill(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        with open(self.logs / "broker.log", "ab") as log:
            log.write(f"\n===== REPRO kill -9 at {time.time():.3f} =====\n".encode())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@dataclass
class Ledger:
    """Delivery reports, by sequence number."""

    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)
    sent: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        seq = int(msg.value().split(b",", 1)[0])
        if err is None:
            self.acked[seq] = (msg.partition(), msg.offset())
        else:
            self.failed[seq] = str(err)


def producer_config(bootstrap: str, log_path: Path) -> tuple[dict[str, Any], logging.Logger]:
    config = ConfluentClients(bootstrap, {}).producer_config(idempotence=True)
    logger = logging.getLogger("repro.librdkafka")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logger.addHandler(handler)
    config.update({"debug": "eos,msg,protocol", "logger": logger, "log_level": 7})
    return config, logger


def read_back(bootstrap: str) -> dict[int, dict[int, int]]:
    """Every record of the topic: {partition: {offset: seq}}."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "repro-readback",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_uncommitted",
        }
    )
    out: dict[int, dict[int, int]] = {p: {} for p in range(4)}
    ends: dict[int, int] = {}
    for part in range(4):
        _lo, hi = consumer.get_watermark_offsets(TopicPartition(TOPIC, part), timeout=10)
        ends[part] = hi
    consumer.assign([TopicPartition(TOPIC, q, 0) for q in range(4) if ends[q] > 0])
    done = {q for q in range(4) if ends[q] == 0}
    deadline = time.monotonic() + 120
    while len(done) < 4 and time.monotonic() < deadline:
        for m in consumer.consume(5000, timeout=1.0):
            p, o, err, value = m.partition(), m.offset(), m.error(), m.value()
            if p is None or o is None:
                continue
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF and o >= ends[p]:
                    done.add(p)
                continue
            out[p][o] = int((value or b"-1").split(b",", 1)[0])
            if o + 1 >= ends[p]:
                done.add(p)
    consumer.close()
    if len(done) < 4:
        raise SystemExit(f"read back incomplete: {done}")
    return out


def compare(ledger: Ledger, topic: dict[int, dict[int, int]]) -> dict[str, Any]:
    where: dict[int, list[tuple[int, int]]] = {}
    for p, recs in topic.items():
        for o, seq in recs.items():
            where.setdefault(seq, []).append((p, o))
    with ledger.lock:
        acked = dict(ledger.acked)
        failed = dict(ledger.failed)
    lost = sorted(s for s in acked if s not in where)
    moved = sorted(s for s in acked if s in where and acked[s] not in where[s])
    dup = sorted(s for s, at in where.items() if len(at) > 1)
    return {
        "acknowledged": len(acked),
        "failed_reports": len(failed),
        "records_in_topic": sum(len(r) for r in topic.values()),
        "lost": lost,
        "moved": moved,
        "duplicated": dup,
        "failed_but_present": sorted(s for s in failed if s in where),
        "log_end": {p: (max(r) + 1 if r else 0) for p, r in topic.items()},
        "where": where,
        "acked_at": acked,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--kills", type=int, default=50, help="kill -9 + restart cycles (50)")
    ap.add_argument("--rate", type=float, default=300.0, help="messages per second (300)")
    ap.add_argument(
        "--min-run", type=float, default=2.0, help="least seconds of producing before a kill (2)"
    )
    ap.add_argument(
        "--max-run", type=float, default=8.0, help="most seconds of producing before a kill (8)"
    )
    ap.add_argument(
        "--down",
        type=float,
        default=1.0,
        help="most seconds the broker stays dead, drawn 0..this (1)",
    )
    ap.add_argument(
        "--after",
        type=float,
        default=3.0,
        help="seconds of producing after the restart, before the flush (3)",
    )
    ap.add_argument(
        "--timestamps",
        choices=["now", "event"],
        default="now",
        help="record timestamps: the wall clock (now), or a simulated event clock like "
        "the chaos stream's (event: from midnight 10 days ago, --event-step-s per message, "
        "2%% of them up to 6 h late)",
    )
    ap.add_argument(
        "--event-step-s",
        type=float,
        default=2.0,
        help="simulated seconds per message with --timestamps event (2, the simulator's gap)",
    )
    ap.add_argument(
        "--hold",
        action="store_true",
        help="as `pos-chaos` holds its stream at a fault's point: stop producing (and "
        "polling) before each kill, kill 0-50 ms later (the last batches in flight or just "
        "answered), then produce again while the broker restarts",
    )
    ap.add_argument("--seed", type=int, default=74)
    ap.add_argument("--port", type=int, default=19092)
    ap.add_argument("--controller-port", type=int, default=19093)
    ap.add_argument("--heap", default="512m")
    ap.add_argument(
        "--root",
        type=Path,
        default=Path("/tmp/repro-kafka"),
        help="broker state and logs (wiped at the start)",
    )
    ap.add_argument(
        "--broker-prop",
        action="append",
        default=[],
        metavar="K=V",
        help="extra server.properties line (a candidate fix), repeatable",
    )
    ap.add_argument(
        "--json",
        type=Path,
        default=None,
        help="summary (default .state/repro/broker_kill_<time>.json)",
    )
    args = ap.parse_args()
    if args.port in (9092,) or args.controller_port in (9093,):
        raise SystemExit("refusing the project's shared ports")
    extra = dict(kv.split("=", 1) for kv in args.broker_prop)
    rng = random.Random(args.seed)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    out = args.json or REPO / ".state" / "repro" / f"broker_kill_{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)

    broker = Broker(args.root, args.port, args.controller_port, args.heap, extra)
    broker.format()
    took = broker.start()
    pid = broker.proc.pid if broker.proc else None
    say(f"broker pid {pid} ready in {took:.1f} s ({broker.bootstrap}, state {args.root})")
    admin = AdminClient(quiet(broker.bootstrap))
    admin.create_topics([NewTopic(TOPIC, 4, 1, config={"min.insync.replicas": "1"})])[TOPIC].result(
        30
    )
    while not broker.ready():
        time.sleep(0.2)

    ledger = Ledger()
    config, _ = producer_config(broker.bootstrap, broker.logs / "producer.log")
    fatal: list[str] = []

    def error_cb(err: KafkaError) -> None:
        if err.fatal():
            fatal.append(str(err))

    config["error_cb"] = error_cb
    producer = Producer(config)
    started = time.monotonic()
    day = 86_400_000
    event_start_ms = (int(time.time() * 1000) // day - 10) * day
    seq = 0

    def produce_for(seconds: float) -> None:
        nonlocal seq
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ahead = started + ledger.sent / args.rate - time.monotonic()
            if ahead > 0:
                producer.poll(max(ahead, 0.001))
                continue
            value = f"{seq},{time.time():.6f},".encode() + b"x" * 200
            ts = 0  # 0: the client stamps the wall clock
            if args.timestamps == "event":
                ts = event_start_ms + int(seq * args.event_step_s * 1000)
                if rng.random() < 0.02:
                    ts -= int(rng.uniform(0, 6 * 3600) * 1000)
            try:
                producer.produce(
                    TOPIC,
                    key=f"store-{seq % 61}".encode(),
                    value=value,
                    timestamp=ts,
                    on_delivery=ledger.on_delivery,
                )
            except BufferError:
                producer.poll(0.1)
                continue
            seq += 1
            ledger.sent += 1
            producer.poll(0)

    kills: list[dict[str, Any]] = []
    prev_lost: set[int] = set()
    prev_dup: set[int] = set()
    try:
        produce_for(2.0)
        for k in range(1, args.kills + 1):
            run_s = rng.uniform(args.min_run, args.max_run)
            down_s = rng.uniform(0, args.down)
            # The kill lands from a thread while the main thread keeps producing.
            killed_at: dict[str, float] = {}

            def strike(run_s: float = run_s, killed_at: dict[str, float] = killed_at) -> None:
                time.sleep(run_s)
                killed_at["seq"] = seq
                killed_at["acked"] = len(ledger.acked)
                killed_at["t"] = time.time()
                broker.kill()

            if args.hold:
                produce_for(run_s)
                paused = time.monotonic()
                # No poll: like `produce()` blocked in the held stream, the last messages'
                # delivery reports wait; within 0-50 ms they may still be in flight.
                time.sleep(rng.uniform(0, 0.05))
                strike(0.0)
                started += time.monotonic() - paused  # no catch-up burst after the hold
            else:
                t = threading.Thread(target=strike)
                t.start()
                produce_for(run_s + 0.05)
                t.join()
            produce_for(down_s)
            starter: dict[str, float] = {}
            st = threading.Thread(target=lambda s=starter: s.update(took=broker.start()))
            st.start()
            while st.is_alive():
                produce_for(0.5)
            st.join()
            produce_for(args.after)
            left = producer.flush(120)
            topic = read_back(broker.bootstrap)
            c = compare(ledger, topic)
            new_lost = sorted(set(c["lost"]) - prev_lost)
            new_dup = sorted(set(c["duplicated"]) - prev_dup)
            prev_lost, prev_dup = set(c["lost"]), set(c["duplicated"])
            detail = {
                "kill": k,
                "killed_at_unix": killed_at["t"],
                "sent_before_kill": killed_at["seq"],
                "acked_before_kill": killed_at["acked"],
                "restart_s": round(starter["took"], 1),
                "unflushed": left,
                "acknowledged": c["acknowledged"],
                "records_in_topic": c["records_in_topic"],
                "log_end": c["log_end"],
                "lost_total": len(c["lost"]),
                "duplicated_total": len(c["duplicated"]),
                "moved_total": len(c["moved"]),
                "failed_reports": c["failed_reports"],
                "fatal": list(fatal),
                "new_lost": [
                    {
                        "seq": s,
                        "reported_partition": c["acked_at"][s][0],
                        "reported_offset": c["acked_at"][s][1],
                        "now_at_that_offset": topic[c["acked_at"][s][0]].get(c["acked_at"][s][1]),
                    }
                    for s in new_lost
                ],
                "new_duplicated": [{"seq": s, "at": c["where"][s]} for s in new_dup],
            }
            kills.append(detail)
            say(
                f"kill {k}/{args.kills}: after {run_s:.1f} s, down {down_s:.1f} s, back in "
                f"{starter['took']:.1f} s; acked {c['acknowledged']:,}, in topic "
                f"{c['records_in_topic']:,}, lost {len(c['lost'])}, dup {len(c['duplicated'])}, "
                f"moved {len(c['moved'])}, failed {c['failed_reports']}"
                + (f"; NEW LOSS {detail['new_lost']}" if new_lost else "")
                + (f"; FATAL {fatal}" if fatal else "")
            )
            if fatal:
                break
            summary = {
                "command": " ".join(sys.argv),
                "broker_props_extra": extra,
                "rate": args.rate,
                "seed": args.seed,
                "kills": len(kills),
                "sent": ledger.sent,
                "acknowledged": c["acknowledged"],
                "lost": len(c["lost"]),
                "duplicated": len(c["duplicated"]),
                "moved": len(c["moved"]),
                "failed_reports": c["failed_reports"],
                "failed_but_present": len(c["failed_but_present"]),
                "timestamps": args.timestamps,
                "logs": str(broker.logs),
                "per_kill": kills,
            }
            out.write_text(json.dumps(summary, indent=1, default=str))
    finally:
        producer.flush(10)
        broker.stop()
        if out.exists():
            summary = json.loads(out.read_text())
            summary["log_signatures"] = count_signatures(broker.logs)
            out.write_text(json.dumps(summary, indent=1, default=str))
            say(f"log signatures: {summary['log_signatures']}")
    say(f"summary: {out}")


if __name__ == "__main__":
    main()
