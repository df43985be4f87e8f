"""The one catalog: every table, scheduled job and work queue of the system.

Adding a job is one `JobSpec` entry in its subsystem's `catalog.py`; the
runtime registry and the infrastructure (rule, function, environment, grants,
alarms) are both derived from `CATALOG`.
"""

from jobfence.registry import JobSpec, Registry
from jobs.backoffice import catalog as backoffice
from jobs.club import catalog as club
from jobs.commerce import catalog as commerce
from jobs.listings import catalog as listings

JOBS = (*commerce.JOBS, *backoffice.JOBS, *listings.JOBS, *club.JOBS)

# The missed-run auditor (issue 12): every 15 minutes it builds each job's ledger since its last audit and
# emits a `missed` metric per job (an alarm per job in infra/jobfence_cdk/monitoring.py). It only reads: each job's run
# rows (one range query) and lease item (its rule toggles), under LeadingKeys = the audited jobs.
AUDITOR = JobSpec(
    name="audit_missed_runs",
    subsystem="audit",
    entry="jobs.auditor:build_audit_missed_runs",
    schedule="rate(15 minutes)",
    interval_s=900,
    timeout_s=60,
    audits=tuple(job.name for job in JOBS),
    description="every expected tick of every job accounted for: emits missed per job",
)

CATALOG = Registry(
    tables=[*commerce.TABLES, *backoffice.TABLES, *listings.TABLES, *club.TABLES],
    jobs=[*JOBS, AUDITOR],
    queues=[*listings.QUEUES, *club.QUEUES],
)
