"""The invoices app's catalog: its one table and its one scheduled job.

The CDK app derives everything from it (the table and its index, the rule, the function, its
environment, a role that may query and update this table and nothing else, the alarms); the
scheduled handler looks its job up in it. It is data: importing it loads no job code.
"""

from jobfence import IndexSpec, JobSpec, Registry, TableSpec

SUBSYSTEM = "billing"

INVOICES = TableSpec(
    name="invoices",
    subsystem=SUBSYSTEM,
    partition_key=("invoice_id", "S"),
    # sparse: only open invoices carry `open`, so the job reads open invoices by due date, never the table
    indexes=(IndexSpec("open_by_due", partition_key=("open", "S"), sort_key=("due_at", "N"), projection="KEYS_ONLY"),),
    description="invoices: open until paid, overdue once past due unpaid",
)

MARK_OVERDUE = JobSpec(
    name="mark_overdue_invoices",
    subsystem=SUBSYSTEM,
    entry="invoices.overdue:build_mark_overdue_invoices",
    schedule="rate(1 hour)",
    interval_s=3600,  # the interval gate: a duplicate or early tick within the hour does nothing
    timeout_s=120,
    tables={"invoices": "query+update"},  # the open_by_due index, then one conditional update per invoice
    description="every open invoice past its due date becomes overdue, 100 an hour at most",
)

CATALOG = Registry(tables=[INVOICES], jobs=[MARK_OVERDUE])
