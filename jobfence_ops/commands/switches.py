"""The incident switches: rules (schedules) and event source mappings (queue workers).

`disable --all` stops both in one command (the runbook's incident step):
a disabled rule sends no more ticks, a disabled mapping leaves messages
waiting in their queue instead of delivering them to a worker.

Each rule toggle is recorded on the job's lease item (`jobfence.ledger`), after
the rule changed: the run ledger labels the ticks of a disabled period
`disabled`, not `missed`. A record that fails to land is caught up by the next
`status`, which records a rule found in a state its record disagrees with.
"""

from __future__ import annotations

from dataclasses import dataclass

from jobfence.ledger import RuleToggles
from jobfence_ops.runtime.topology import read_rule
from jobfence_ops.targets import OperatorError, Target

MAPPING_ENABLED = ("Enabled", "Enabling", "Updating")


@dataclass(frozen=True)
class Switch:
    """One rule or mapping after the change, as the service reports it."""

    kind: str  # rule | mapping
    name: str  # the job (rule) or the worker function (mapping)
    resource: str  # the rule name or the mapping's UUID
    state: str  # ENABLED / DISABLED for a rule; Enabled / Disabled / ... for a mapping


def set_rules(target: Target, enabled: bool, job: str | None = None) -> list[Switch]:
    """Enable or disable every job's rule, or one job's."""
    rules = target.topology.job_rules()
    if job is not None and job not in rules:
        raise OperatorError(f"no rule ticks job {job!r}; jobs with rules: {', '.join(sorted(rules))}")
    events = target.session.client("events")
    toggles = (
        RuleToggles(target.session.client("dynamodb"), target.topology.leases_table)
        if target.topology.leases_table
        else None
    )
    changes = []
    for name, rule in sorted(rules.items()):
        if job is not None and name != job:
            continue
        (events.enable_rule if enabled else events.disable_rule)(Name=rule.name)
        if toggles is not None:
            toggles.record(name, enabled, target.clock.now_ms())
        changes.append(Switch("rule", name, rule.name, read_rule(events, rule.name).state))
    return changes


def set_workers(target: Target, enabled: bool) -> list[Switch]:
    """Resume or pause every queue worker (the SQS event source mappings of the stack)."""
    lam = target.session.client("lambda")
    changes = []
    for mapping in sorted(target.topology.mappings, key=lambda m: m.function_arn):
        lam.update_event_source_mapping(UUID=mapping.uuid, Enabled=enabled)
        state = lam.get_event_source_mapping(UUID=mapping.uuid).get("State", "?")
        changes.append(
            Switch("mapping", target.topology.function_by_arn(mapping.function_arn).name, mapping.uuid, state)
        )
    return changes


def set_everything(target: Target, enabled: bool) -> list[Switch]:
    """Every rule and every worker at once: the incident kill switch and its undo."""
    return set_rules(target, enabled) + set_workers(target, enabled)
