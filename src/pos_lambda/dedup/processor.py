"""The deduplicated topic's processor: `pos.transactions` -> `pos.receipts`, the step of
src/pos_lambda/dedup/step.py run by the transactional shell
(src/pos_lambda/transactional/processor.py: transactions with the input offsets, KIP-447,
read_committed, fencing by transactional.id `pos-receipts-<instance id>`, a lease, the
state rebuilt on assignment by re-reading each partition up to its committed offset).

    pos-receipts run        # make receipts
"""

from __future__ import annotations

from pos_lambda.adapters.kafka_clients import KafkaClients
from pos_lambda.dedup.step import DedupState, DedupStep
from pos_lambda.settings import Settings
from pos_lambda.transactional.lease import Lease
from pos_lambda.transactional.processor import Job, Processor


def job(settings: Settings) -> Job:
    return Job(
        "receipts",
        settings.receipts,
        settings.topics.transactions,
        settings.topics.receipts,
        outputs="receipts",
        dead_letter_topic=settings.topics.dead_letters,
    )


def processor(
    settings: Settings, lease: Lease | None = None, clients: KafkaClients | None = None
) -> Processor[DedupState]:
    return Processor(settings, job(settings), DedupStep(), lease=lease, clients=clients)
