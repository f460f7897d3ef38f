"""The exactly-once auditor: every view against the producer's ground-truth ledger.

    pos-audit --ledger .state/demo-ledger --json audit.json     # or: make audit

    from audit import audit
    report = audit(load_settings(), ".state/demo-ledger")

Pure core: audit.expectations (what the ledger implies), audit.compare (lost,
duplicated, wrong), audit.report (verdicts, table, JSON). Shell: audit.readers (the
views, through the serving layer's adapters), audit.run (`audit`), audit.cli.
"""

from audit.readers import AuditError
from audit.report import AuditReport, ViewResult
from audit.run import VIEWS, audit

__all__ = ["VIEWS", "AuditError", "AuditReport", "ViewResult", "audit"]
