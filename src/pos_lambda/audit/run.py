"""`audit(settings, ledger_dir)`: every view against the producer's ledger.

    from pos_lambda.settings import load_settings
    from pos_lambda.audit import audit

    report = audit(load_settings(), ".state/demo-ledger")
    print(report.table())
    assert report.clean, report.dumps()

Run it once the pipeline has drained the ledger's topic (`pos-speed run --available-now`,
a batch run over the data's days, `pos-alerts run`, `pos-alerts sink` and
`pos-receipts run` caught up).
Expectations come from the ledger only (pos_lambda.audit.expectations); the views are read as
users read them (audit.readers); audit.compare counts the differences. Which views are
exact, and when, is said per view below and in docs/audit.md.

It fails closed: without a piece of its evidence (the ledger's files, a ledger with
messages, the speed layer's checkpoint for the views that need to know what the speed
layer read, the input topic) it raises AuditError naming what is missing ("could not
audit", exit 2), never a report that could read as clean. A view whose producer never
ran (no committed batch version, no alerts processor or sink) is "skipped", never
compared with nothing.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path

from cassandra import DriverException, RequestExecutionException

from pos_lambda.audit import compare
from pos_lambda.audit import expectations as ex
from pos_lambda.audit.readers import (
    FOREIGN_RECORD,
    SPEED_VIEWS_CHECKPOINT,
    AuditError,
    Sources,
    alerts_in_topic,
    committed_offsets,
    end_offsets,
    receipts_in_topic,
    speed_processed,
)
from pos_lambda.audit.report import AuditReport, ViewResult
from pos_lambda.schemas.aggregate import Aggregate
from pos_lambda.schemas.contract import NaturalKey
from pos_lambda.serving.errors import ServingError
from pos_lambda.serving.model import Pointer
from pos_lambda.settings import Settings
from pos_lambda.views.windows import WINDOW

SPEED_VIEWS = ("receipts_by_store_day", "receipt_keys", "agg_15m_speed")
BATCH_VIEWS = ("receipts_batch", "agg_15m_batch")
VIEWS = (
    *SPEED_VIEWS,
    *BATCH_VIEWS,
    "serving_windows",
    "serving_receipts",
    "serving_gaps",
    "conflicts",
    "dead_letters",
    "alerts_topic",
    "alerts_table",
    "receipts_topic",
)
# Views whose verdict depends on what the speed layer has read (its checkpoint).
NEED_SPEED_CHECKPOINT = (*SPEED_VIEWS, "serving_windows", "serving_receipts", "serving_gaps")
LEDGER_FILES = ("receipts.jsonl", "faults.jsonl", "summary.json")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def check_ledger(path: Path) -> None:
    """AuditError naming what is missing, before anything connects anywhere."""
    if not path.is_dir():
        raise AuditError(
            f"ledger directory {path} does not exist: pass the --ledger DIR that "
            "`pos-producer simulate --ledger DIR` wrote (the demo's is .state/demo-ledger)"
        )
    missing = [n for n in LEDGER_FILES if not (path / n).is_file()]
    if missing:
        raise AuditError(
            f"{path} is not a ledger: {', '.join(missing)} missing (written by "
            "`pos-producer simulate --ledger DIR`)"
        )


def missing_evidence(
    settings: Settings, ledger_dir: Path, ledger: ex.Ledger, topic: str, views: list[str]
) -> list[str]:
    """What the audit of `views` needs and cannot find on disk (checked before any
    service is asked): without it a lost row could not be told from a lagging layer."""
    missing = []
    if not ledger.receipts and not ledger.malformed:
        missing.append(f"the ledger {ledger_dir} holds no messages: nothing to audit against")
    needs_speed = [v for v in views if v in NEED_SPEED_CHECKPOINT]
    if needs_speed and speed_processed(settings, topic) is None:
        missing.append(
            f"the speed layer's checkpoint for topic {topic}: no committed micro-batch of it "
            f"under {settings.checkpoint_dir / SPEED_VIEWS_CHECKPOINT} (POS_DATA_DIR="
            f"{settings.data_dir}), needed by {', '.join(needs_speed)}. Point POS_DATA_DIR at "
            "the directory the speed layer ran with, run `pos-speed run --available-now`, "
            "or leave those views out with --views"
        )
    return missing


def alert_rules(settings: Settings, ledger: ex.Ledger) -> ex.AlertRules:
    """The thresholds the processor runs with (the same POS_ALERTS_* settings) and the
    store hours the ledger recorded (the `stores` table's, as the stream was sent)."""
    return ex.AlertRules(
        high_value=settings.alerts.high_value_threshold,
        large_return=settings.alerts.large_return_threshold,
        silence=timedelta(minutes=settings.alerts.silence_minutes),
        opens=settings.alerts.store_opens_at,
        closes=settings.alerts.store_closes_at,
        stores=ex.ledger_store_weeks(ledger.summary),
    )


def audit(
    settings: Settings,
    ledger_dir: str | Path,
    views: Iterable[str] | None = None,
    progress: Callable[[str], None] | None = _stderr,
) -> AuditReport:
    """Compare each view (default: all of VIEWS) with the ledger; see the module doc."""
    ledger_dir = Path(ledger_dir)
    check_ledger(ledger_dir)
    requested = list(views) if views is not None else None
    unknown = sorted(set(requested or ()) - set(VIEWS))
    if unknown:
        raise AuditError(f"unknown view(s) {', '.join(unknown)}; choose from {', '.join(VIEWS)}")
    chosen = [v for v in VIEWS if requested is None or v in requested]
    say = progress or (lambda _line: None)
    ledger = ex.load(ledger_dir)
    topic = str(ledger.summary.get("topic") or settings.topics.transactions)
    missing = missing_evidence(settings, ledger_dir, ledger, topic, chosen)
    if missing:
        raise AuditError("evidence missing: " + "; ".join(missing))
    say(
        f"ledger {ledger_dir}: {len(ledger.receipts)} receipts, {len(ledger.malformed)} "
        f"malformed messages, topic {topic}; keyspace {settings.cassandra.keyspace}"
    )
    sources = Sources(settings)
    try:
        ctx = _Context(settings, ledger, topic, sources)
        results = []
        for name in chosen:
            say(f"auditing {name} ...")
            result = getattr(ctx, name)()
            result.requested = requested is not None
            results.append(result)
    except ServingError as exc:  # Unavailable: Cassandra down or schema missing
        raise AuditError(str(exc)) from exc
    except (DriverException, RequestExecutionException) as exc:  # the auditor's own reads
        raise AuditError(
            f"Cassandra refused or did not answer: {exc} (is it running? is keyspace "
            f"{settings.cassandra.keyspace!r} there? `make status`, `make schema`)"
        ) from exc
    finally:
        sources.close()
    return AuditReport(str(ledger_dir), settings.cassandra.keyspace, topic, results)


class _Context:
    """What the views share: the ledger split by the speed bound, the batch pointer,
    and whether the speed layer has read the whole topic."""

    def __init__(self, settings: Settings, ledger: ex.Ledger, topic: str, src: Sources) -> None:
        self.settings, self.ledger, self.topic, self.src = settings, ledger, topic, src
        self.bound = timedelta(hours=settings.speed.max_lateness_hours)
        facts = list(ledger.receipts.values())
        self.within = [f for f in facts if not f.beyond(self.bound)]
        self.beyond = [f for f in facts if f.beyond(self.bound)]
        self.beyond_keys = {f.key for f in self.beyond}
        self.store_days = ledger.store_days
        days = [d for _, d in self.store_days]
        self.pointer = src.pointer(min(days), max(days)) if days else None
        self._speed_note: str | None = None

    # --- the speed layer ------------------------------------------------------------

    def speed_caught_up(self) -> tuple[bool, str]:
        """Whether the speed views query has committed micro-batches up to the end of
        the topic (its checkpoint vs Kafka): only then must its views hold everything."""
        if self._speed_note is None:
            ends = end_offsets(self.settings, self.topic)
            done = speed_processed(self.settings, self.topic)
            # Fail closed: without both ends nothing tells a loss from a lag.
            if ends is None:
                raise AuditError(f"evidence missing: no topic {self.topic} in Kafka")
            if done is None:
                raise AuditError(
                    f"evidence missing: the speed layer's checkpoint for {self.topic} under "
                    f"{self.settings.checkpoint_dir / SPEED_VIEWS_CHECKPOINT} went away"
                )
            behind = sum(max(0, end - done.get(p, 0)) for p, end in ends.items())
            self._speed_note = (
                "" if behind == 0 else f"speed layer behind the topic's end by {behind} records"
            )
        return self._speed_note == "", self._speed_note

    def _speed_view(self, name: str, tally: compare.Tally, beyond: int | None) -> ViewResult:
        """beyond: receipts the view leaves out by its bound (None: it holds them all)."""
        caught, why = self.speed_caught_up()
        notes = [] if caught else [f"not exact now ({why}): gaps are reported, not failed"]
        if beyond is not None:
            notes.append(
                f"{beyond} receipts beyond the speed bound ({self.bound / timedelta(hours=1):g} h) "
                "left to the batch layer"
            )
        return ViewResult(
            name, exact=caught, tally=tally, beyond_bound=beyond or 0, note="; ".join(notes)
        )

    def receipts_by_store_day(self) -> ViewResult:
        observed = [
            (k, row)
            for k, row in self.src.speed_receipts(self.store_days)
            if k not in self.beyond_keys  # by design not there; harmless if it were
        ]
        expected = {f.key: f.row() for f in self.within}
        return self._speed_view(
            "receipts_by_store_day", compare.keyed_rows(expected, observed), len(self.beyond)
        )

    def receipt_keys(self) -> ViewResult:
        # Every receipt, those beyond the bound too (flagged): resends are found by it.
        expected = {f.key: f.index_row(self.bound) for f in self.ledger.receipts.values()}
        observed = self.src.receipt_keys(list(expected))
        return self._speed_view("receipt_keys", compare.keyed_rows(expected, observed), None)

    def agg_15m_speed(self) -> ViewResult:
        _, speed = self.src.aggregates(self.store_days, self._pointer_or_empty())
        tally = compare.aggregate_rows(ex.aggregates(self.within), speed)
        return self._speed_view("agg_15m_speed", tally, len(self.beyond))

    # --- the batch layer ------------------------------------------------------------

    def _pointer_or_empty(self) -> Pointer:
        return self.pointer or Pointer(None)

    def _covered(self) -> list[ex.ReceiptFact]:
        p = self._pointer_or_empty()
        return [f for f in self.ledger.receipts.values() if p.covering(f.window_start)]

    def _batch_note(self) -> str:
        horizon = self._pointer_or_empty().horizon
        assert horizon is not None  # _no_batch skipped the view otherwise
        return f"exact up to the horizon {horizon.isoformat()} (committed versions only)"

    def _no_batch(self, name: str) -> ViewResult | None:
        """Skipped, not "equal": with no committed version both sides would be empty."""
        if self._pointer_or_empty().horizon is not None:
            return None
        return ViewResult(
            name, exact=True, status="skipped",
            note="no committed batch version over the ledger's days: run `make batch` to audit it",
        )  # fmt: skip

    def receipts_batch(self) -> ViewResult:
        if (skipped := self._no_batch("receipts_batch")) is not None:
            return skipped
        expected = {f.key: f.row() for f in self._covered()}
        observed = self.src.batch_receipts(self.store_days, self._pointer_or_empty())
        tally = compare.keyed_rows(expected, observed)
        return ViewResult("receipts_batch", exact=True, tally=tally, note=self._batch_note())

    def agg_15m_batch(self) -> ViewResult:
        if (skipped := self._no_batch("agg_15m_batch")) is not None:
            return skipped
        batch, _ = self.src.aggregates(self.store_days, self._pointer_or_empty())
        tally = compare.aggregate_rows(ex.aggregates(self._covered()), batch)
        return ViewResult("agg_15m_batch", exact=True, tally=tally, note=self._batch_note())

    # --- the merged answer ------------------------------------------------------------

    def serving_windows(self) -> ViewResult:
        """Serving.windows per store over the ledger's span: a window the batch answers
        must equal the whole ledger's, one the speed view answers the ledger's within
        the speed bound."""
        everything = ex.aggregates(self.ledger.receipts.values())
        within = ex.aggregates(self.within)
        if not everything:
            return ViewResult("serving_windows", exact=True)
        first = min(ws for _, ws in everything)
        end = max(ws for _, ws in everything) + WINDOW
        pointer = self._pointer_or_empty()
        observed: list[tuple[ex.WindowKey, Aggregate]] = []
        source: dict[ex.WindowKey, str] = {}
        for store in self.ledger.stores:
            for w in self.src.windows(store, first, end):
                key = (store, w.window_start)
                source[key] = w.source
                observed.append((key, Aggregate.of_row(w)))
        expected: dict[ex.WindowKey, Aggregate] = {}
        beyond = 0
        for key, agg in everything.items():
            by_batch = source.get(key, "batch" if pointer.covering(key[1]) else "speed")
            if by_batch == "batch":
                expected[key] = agg
            else:
                part = within.get(key)
                beyond += agg.receipt_count - (part.receipt_count if part else 0)
                if part is not None:
                    expected[key] = part
        tally = compare.aggregate_rows(expected, observed)
        caught, why = self.speed_caught_up()
        speed_answers = any(s == "speed" for s in source.values())
        exact = caught or not speed_answers
        batch_windows = sum(1 for s in source.values() if s == "batch")
        note = f"{batch_windows} windows answered by batch, {len(source) - batch_windows} by speed"
        if not exact:
            note += f"; not exact now ({why}): gaps are reported, not failed"
        return ViewResult("serving_windows", exact, tally, beyond_bound=beyond, note=note)

    def serving_receipts(self) -> ViewResult:
        """Serving.receipts per store-day: receipts of batch-answered windows from the
        committed version, the rest from the speed view (within the bound)."""
        pointer = self._pointer_or_empty()
        expected: dict[NaturalKey, ex.RawRow] = {}
        beyond = 0
        for f in self.ledger.receipts.values():
            if pointer.covering(f.window_start) is not None or not f.beyond(self.bound):
                expected[f.key] = f.row()
            else:
                beyond += 1
        rows = self.src.serving_receipts(self.store_days)
        observed = [(k, row) for k, row, _ in rows]
        tally = compare.keyed_rows(expected, observed)
        caught, why = self.speed_caught_up()
        exact = caught or all(source == "batch" for *_, source in rows)
        note = "" if exact else f"not exact now ({why}): gaps are reported, not failed"
        return ViewResult("serving_receipts", exact, tally, beyond_bound=beyond, note=note)

    def serving_gaps(self) -> ViewResult:
        """Serving.gaps per store-day: each device's first and last number, receipts,
        missing ranges and revenue; a final answer (the batch's gaps view) against every receipt of
        the ledger, a provisional one (the speed view's) against those within the bound."""
        every = ex.device_days(self.ledger.receipts.values())
        within = ex.device_days(self.within)
        expected: dict[ex.DeviceDayKey, ex.DeviceDayRow] = {}
        observed: list[tuple[ex.DeviceDayKey, ex.DeviceDayRow]] = []
        bases: Counter[str] = Counter()
        for store, day in self.store_days:
            answer = self.src.gaps(store, day)
            bases[answer.basis] += 1
            implied = every if answer.basis == "final" else within
            expected |= {k: v for k, v in implied.items() if k[:2] == (store, day)}
            observed += [
                (
                    (store, day, d.device),
                    (d.first, d.last, d.receipts, tuple(m.text() for m in d.missing), d.revenue),
                )
                for d in answer.devices
            ]
        tally = compare.keyed_rows(expected, observed)
        caught, why = self.speed_caught_up()
        exact = caught or set(bases) <= {"final"}
        note = ", ".join(f"{n} store-days {basis}" for basis, n in sorted(bases.items()))
        if not exact:
            note += f"; not exact now ({why}): gaps are reported, not failed"
        return ViewResult("serving_gaps", exact, tally, note=note)

    # --- conflicts, dead letters ------------------------------------------------------

    def conflicts(self) -> ViewResult:
        observed = self.src.conflicts(self.store_days)
        tally = compare.identities(self.ledger.conflicts, observed)
        return ViewResult("conflicts", exact=True, tally=tally)

    def dead_letters(self) -> ViewResult:
        observed = self.src.dead_letters(self.topic)
        tally = compare.dead_letters(self.ledger.malformed, observed)
        note = ""
        if any(m.value_sha256 is None for m in self.ledger.malformed):
            note = "ledger without message fingerprints: reasons compared as counts"
        return ViewResult("dead_letters", exact=True, tally=tally, note=note)

    # --- alerts -------------------------------------------------------------------------

    def _expected_alerts(self) -> tuple[Counter[ex.AlertIdentity], bool]:
        return ex.expected_alerts(self.ledger, alert_rules(self.settings, self.ledger))

    def _alerts_view(self, name: str, observed: list[ex.AlertIdentity], lag: str) -> ViewResult:
        expected, returns_checked = self._expected_alerts()
        note = lag
        if not returns_checked:
            observed = [a for a in observed if a[0] != "large_return"]
            note = "ledger without returned values: large_return alerts not checked. " + note
        tally = compare.identities(expected, observed)
        return ViewResult(name, exact=True, tally=tally, note=note.strip())

    def alerts_topic(self) -> ViewResult:
        s = self.settings
        committed = committed_offsets(s, s.alerts.group_id, self.topic)
        if committed is None:
            return _never_ran(
                "alerts_topic", f"the alerts processor (group {s.alerts.group_id}) never "
                f"committed on {self.topic}: run `pos-alerts run` over it to audit alerts",
            )  # fmt: skip
        records = alerts_in_topic(s) or []
        # A record that is no alert was written by someone else (the processor writes
        # only alerts, validated): the sink skips it, and so does this comparison; the
        # count is reported, so that a stray writer is seen, not hidden.
        observed = [a for a in records if a != FOREIGN_RECORD]
        foreign = len(records) - len(observed)
        lag = self._lag(committed)
        if foreign:
            lag = f"{foreign} foreign record(s) on {s.topics.alerts}, not alerts: skipped. {lag}"
        return self._alerts_view("alerts_topic", observed, lag)

    def alerts_table(self) -> ViewResult:
        s = self.settings
        if committed_offsets(s, s.alerts.sink_group_id, s.topics.alerts) is None:
            return ViewResult(
                "alerts_table", exact=True, status="skipped",
                note=f"the alert sink (group {s.alerts.sink_group_id}) never committed on "
                f"{s.topics.alerts}: run `pos-alerts sink --until-caught-up` to audit the table",
            )  # fmt: skip
        return self._alerts_view("alerts_table", self.src.alerts_table(), "")

    # --- the deduplicated topic -----------------------------------------------------------

    def receipts_topic(self) -> ViewResult:
        """pos.receipts (read_committed): every receipt of the ledger once, keyed by its
        natural key, with the content of its first copy (the original: the ledger's
        values), and nothing else (no resend, no conflicting copy, no malformed message)."""
        s = self.settings
        committed = committed_offsets(s, s.receipts.group_id, self.topic)
        if committed is None:
            return _never_ran(
                "receipts_topic", f"the deduplicated topic's processor (group "
                f"{s.receipts.group_id}) never committed on {self.topic}: run `pos-receipts "
                f"run` over it to audit {s.topics.receipts}",
            )  # fmt: skip
        # A record that is no receipt of its key reads as (None, None): never expected.
        expected: dict[NaturalKey | None, ex.TopicRow | None] = {
            f.key: f.topic_row() for f in self.ledger.receipts.values()
        }
        observed = receipts_in_topic(s) or []
        tally = compare.keyed_rows(expected, observed)
        return ViewResult("receipts_topic", exact=True, tally=tally, note=self._lag(committed))

    def _lag(self, committed: dict[int, int]) -> str:
        """How far a processor that committed `committed` is behind the input's end."""
        ends = end_offsets(self.settings, self.topic) or {}
        behind = sum(max(0, e - committed.get(p, 0)) for p, e in ends.items())
        return f"processor {behind} records behind {self.topic}" if behind else ""


def _never_ran(name: str, note: str) -> ViewResult:
    """Skipped, not "equal": a processor that never committed wrote nothing to compare."""
    return ViewResult(name, exact=True, status="skipped", note=note)
