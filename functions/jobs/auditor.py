"""`audit_missed_runs`: the catalog's missed-run auditor (`jobfence.auditor`), auditing every other job."""

from __future__ import annotations

from jobfence.auditor import audit_missed_runs, cloudwatch_emitter, lambda_invoker
from jobfence.lease_toggles import RuleToggles
from jobfence.runs import RunStore
from jobfence.scheduled import JobDeps


def build_audit_missed_runs(deps: JobDeps):
    from jobs.catalog import CATALOG  # the catalog names this module: import it when the job is built

    specs = [CATALOG.job(name) for name in deps.spec.audits]
    runs = RunStore(deps.dynamodb, deps.settings.runs_table)
    toggles = RuleToggles(deps.dynamodb, deps.settings.leases_table)
    emit = cloudwatch_emitter(deps.metrics_namespace)
    # the functions of the jobs it catches up (FUNCTION_<JOB>, set by infra for catch_up=once jobs only)
    invoke = lambda_invoker(deps.session.client("lambda"), deps.settings.functions)
    return lambda ctx: audit_missed_runs(specs, runs, toggles, emit, invoke, deps.logger, ctx)
