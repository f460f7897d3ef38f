"""Oversized malformed messages (just over the contract's 64 KiB, larger, and near
Kafka's 1 MB message limit), sent mid-stream by a second idempotent producer: recovered
when each is a dead letter (found by its bytes' fingerprint, as the auditor finds it).
The ledger has them from the start (`prepare`), as dead letters to be."""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass
from typing import Any

from pos_lambda.producer.simulation import OutgoingMessage
from pos_lambda_dev.demo.chaos_context import Chaos
from pos_lambda_dev.demo.faults.base import Fault, Survived
from pos_lambda_dev.demo.steps import await_or_fail, cql_session

# In bytes: just over the contract's 64 KiB, larger, and near Kafka's default 1 MB
# message limit.
OVERSIZED_BYTES = (64 * 1024 + 1, 300_000, 900_000)


def prepare(run: Chaos, messages: list[OutgoingMessage]) -> list[dict[str, Any]]:
    """The oversized messages this fault sends (kept on `run.oversized`): the stream's
    first receipt, padded, as ledger faults the auditor expects as dead letters with
    reason too_large."""
    from pos_lambda.producer import malformed
    from pos_lambda.schemas.contract import Receipt, parse_message

    parsed = ((m, parse_message(m.value)) for m in messages)
    like, receipt = next((m, r) for m, r in parsed if isinstance(r, Receipt))
    faults = []
    for size in OVERSIZED_BYTES:
        kind, value, reason = malformed.oversized_message(receipt, size)
        run.oversized.append(OutgoingMessage(like.key, value, 0, f"malformed:{kind}"))
        faults.append({
            "kind": "malformed", "malformed_kind": kind, "expected_reason": reason,
            "value_sha256": hashlib.sha256(value).hexdigest(),
            "detail": f"{kind} message of {size:,} bytes; the validator must say {reason}",
        })  # fmt: skip
    return faults


def with_oversized(summary: dict[str, Any], faults: list[dict[str, Any]]) -> dict[str, Any]:
    """The ledger's summary counting the oversized messages too (they are in the topic)."""
    kinds = dict(summary.get("malformed_kinds", {}))
    for f in faults:
        kinds[f["malformed_kind"]] = kinds.get(f["malformed_kind"], 0) + 1
    counts = dict(summary["faults"])
    counts["malformed"] = counts.get("malformed", 0) + len(faults)
    return {**summary, "messages": summary["messages"] + len(faults), "faults": counts,
            "malformed_kinds": kinds}  # fmt: skip


@dataclass(frozen=True)
class Sent:
    acked: int
    fingerprints: set[str]  # sha256 of each message's bytes


class OversizedMalformed(Fault[Sent]):
    name = "oversized_malformed"
    label = "oversized malformed messages (over the contract's 64 KiB)"
    slots = (7,)
    table_rank = 4

    def strike(self, run: Chaos) -> Sent:
        from pos_lambda.producer.kafka_sink import produce

        s = run.settings
        sent = produce(run.oversized, s.bootstrap_servers, s.topics.transactions, quiet=True)
        return Sent(sent.acked, {hashlib.sha256(m.value).hexdigest() for m in run.oversized})

    def await_recovery(self, run: Chaos, made: Sent) -> Survived:
        from pos_lambda.schemas import cql as tables

        s = run.settings

        def dead_lettered() -> bool:
            with contextlib.suppress(Exception), cql_session(s) as cql:  # Cassandra restarting
                rows = cql.execute(
                    f"SELECT value_sha256 FROM {tables.DEAD_LETTERS_TABLE}", timeout=60
                )
                return made.fingerprints <= {r.value_sha256 for r in rows}
            return False

        await_or_fail(dead_lettered, run.args.step_timeout, "the oversized dead letters", 2.0)
        sizes = ", ".join(f"{len(m.value):,}" for m in run.oversized)
        return Survived(f"{made.acked} messages of {sizes} bytes, each a dead letter (too_large)")


FAULT = OversizedMalformed()
