"""POS simulator, fault injection, ground-truth ledger and the idempotent Kafka producer.

    pos-producer simulate --count 10000 --seed 7 --ledger ledger/ --resend-rate 0.006
    pos-producer replay messages.jsonl

Pure core: `simulation` (receipts + faults -> OutgoingMessage list + ledger lines),
`malformed`, `catalog`, `ledger` (read/write the ground truth). Shell: `kafka_sink`
(confluent-kafka) and `cli`.
"""
