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

from jobfence.lease_toggles import RuleToggles
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


@dataclass(frozen=True)
class Stopped:
    """What is switched off now: jobs whose rule does not tick, worker functions whose mapping does not deliver."""

    rules: tuple[str, ...]
    workers: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.rules or self.workers)

    def describe(self) -> str:
        parts = []
        if self.rules:
            parts.append(f"{len(self.rules)} rule(s) disabled ({', '.join(self.rules)})")
        if self.workers:
            parts.append(f"{len(self.workers)} queue worker(s) paused ({', '.join(self.workers)})")
        return "; ".join(parts)


def stopped(target: Target) -> Stopped:
    """What is switched off, in a few list calls (every console page's banner reads it)."""
    names = {rule.name: job for job, rule in target.topology.job_rules().items()}
    off: list[str] = []
    for page in target.session.client("events").get_paginator("list_rules").paginate():
        off += [
            names[r["Name"]] for r in page.get("Rules", []) if r.get("Name") in names and r.get("State") != "ENABLED"
        ]
    paused = [w.name for w in worker_states(target) if not running(w)]
    return Stopped(tuple(sorted(off)), tuple(sorted(paused)))


def worker_states(target: Target) -> list[Switch]:
    """Every queue worker's mapping as the service reports it now: one paginated list call (read only)."""
    ours = {m.uuid: target.topology.function_by_arn(m.function_arn).name for m in target.topology.mappings}
    found = []
    for page in target.session.client("lambda").get_paginator("list_event_source_mappings").paginate():
        found += [
            Switch("mapping", ours[m["UUID"]], m["UUID"], m.get("State", "?"))
            for m in page.get("EventSourceMappings", [])
            if m.get("UUID") in ours
        ]
    return sorted(found, key=lambda switch: switch.name)


def running(switch: Switch) -> bool:
    """A rule that ticks, or a mapping that delivers (or is about to)."""
    return switch.state == "ENABLED" if switch.kind == "rule" else switch.state in MAPPING_ENABLED


def set_everything(target: Target, enabled: bool) -> list[Switch]:
    """Every rule and every worker at once: the incident kill switch and its undo."""
    return set_rules(target, enabled) + set_workers(target, enabled)
