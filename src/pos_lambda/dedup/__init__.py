"""The deduplicated topic `pos.receipts`: one record per receipt (natural key), the
winner's, written exactly once by a transactional read-process-write processor
(`pos-receipts run`). Pure core: dedup/step.py; shell: pos_lambda.transactional."""
