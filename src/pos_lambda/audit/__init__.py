"""The exactly-once auditor: every view against the producer's ground-truth ledger.

    pos-audit --ledger .state/demo-ledger --json audit.json     # or: make audit

    from pos_lambda.audit import audit
    report = audit(load_settings(), ".state/demo-ledger")

Pure core: pos_lambda.audit.expectations (what the ledger implies), pos_lambda.audit.compare (lost,
duplicated, wrong), audit.report (verdicts, table, JSON). Shell: audit.readers (the
views, through the serving layer's adapters), pos_lambda.audit.run (`audit`), pos_lambda.audit.cli.
"""

from pos_lambda.audit.readers import AuditError
from pos_lambda.audit.report import AuditReport, ViewResult
from pos_lambda.audit.run import VIEWS, audit

__all__ = ["VIEWS", "AuditError", "AuditReport", "ViewResult", "audit"]
