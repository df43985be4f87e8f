"""What is deployed, read back from the cloud: functions, rules, queues, event-source mappings.

Works the same against the emulator and a real account: the stack's resources
come from CloudFormation, their live settings from Lambda, EventBridge and SQS
(a rule's state is read again whenever it matters, because operators disable
and enable rules on the live system, not in the template).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from jobfence.config import ENV_JOB_NAME, ENV_LEASES_TABLE, ENV_RUNS_TABLE


@dataclass(frozen=True)
class FunctionInfo:
    name: str
    arn: str
    handler: str
    environment: Mapping[str, str]
    timeout_s: int
    memory_mb: int
    logical_id: str
    code_key: str | None = None  # S3 key of its code asset (the local runtime runs that folder)
    on_failure_arn: str | None = None  # async invoke on-failure destination (EventInvokeConfig)

    @property
    def job(self) -> str | None:
        """The scheduled job this function runs (its own JOB_NAME), if it is a job's function."""
        return self.environment.get(ENV_JOB_NAME)


@dataclass(frozen=True)
class RuleInfo:
    name: str
    arn: str
    schedule: str | None
    state: str
    targets: tuple[tuple[str, str | None], ...]  # (function ARN, constant Input or None)


@dataclass(frozen=True)
class QueueInfo:
    name: str
    url: str
    arn: str
    visibility_timeout_s: int
    dead_letter_arn: str | None = None
    max_receive_count: int | None = None


@dataclass(frozen=True)
class MappingInfo:
    uuid: str
    queue_arn: str
    function_arn: str
    batch_size: int
    max_concurrency: int | None
    report_batch_item_failures: bool
    enabled: bool


@dataclass
class Topology:
    """The deployed system, by name."""

    stack_name: str
    functions: dict[str, FunctionInfo] = field(default_factory=dict)
    rules: dict[str, RuleInfo] = field(default_factory=dict)
    queues: dict[str, QueueInfo] = field(default_factory=dict)
    mappings: list[MappingInfo] = field(default_factory=list)
    tables: dict[str, str] = field(default_factory=dict)  # physical name -> logical id

    def function_by_arn(self, arn: str) -> FunctionInfo:
        base = arn.split(":function:", 1)[-1].split(":", 1)[0]
        return self.functions[base]

    def job_functions(self) -> dict[str, FunctionInfo]:
        """Job name -> its function."""
        return {f.job: f for f in self.functions.values() if f.job}

    def job_rules(self) -> dict[str, RuleInfo]:
        """Job name -> the rule that ticks it."""
        out = {}
        for rule in self.rules.values():
            for arn, _ in rule.targets:
                job = self.function_by_arn(arn).job if arn.split(":function:", 1)[-1] in self.functions else None
                if job:
                    out[job] = rule
        return out

    def queue_by_arn(self, arn: str) -> QueueInfo:
        return next(q for q in self.queues.values() if q.arn == arn)

    def core_table(self, env_name: str) -> str | None:
        """The physical leases or runs table, from any job function's environment."""
        for function in self.functions.values():
            if env_name in function.environment:
                return function.environment[env_name]
        return None

    @property
    def leases_table(self) -> str | None:
        return self.core_table(ENV_LEASES_TABLE)

    @property
    def runs_table(self) -> str | None:
        return self.core_table(ENV_RUNS_TABLE)

    @property
    def audit_table(self) -> str | None:
        """The operators' audit table: the stack's "<prefix>-audit" beside its "<prefix>-runs" (or its only one)."""
        runs = self.runs_table
        if runs and runs.endswith("-runs") and runs.removesuffix("-runs") + "-audit" in self.tables:
            return runs.removesuffix("-runs") + "-audit"
        found = [name for name in self.tables if name.endswith("-audit")]
        return found[0] if len(found) == 1 else None

    def as_plain(self) -> dict[str, Any]:
        """A JSON-ready copy (the background runtime hands its topology to each command)."""
        return asdict(self)

    @classmethod
    def from_plain(cls, data: Mapping[str, Any]) -> Topology:
        rules = {}
        for name, rule in data["rules"].items():
            rules[name] = RuleInfo(**{**rule, "targets": tuple((arn, text) for arn, text in rule["targets"])})
        return cls(
            stack_name=data["stack_name"],
            functions={name: FunctionInfo(**f) for name, f in data["functions"].items()},
            rules=rules,
            queues={name: QueueInfo(**q) for name, q in data["queues"].items()},
            mappings=[MappingInfo(**m) for m in data["mappings"]],
            tables=dict(data["tables"]),
        )


def discover(session: Any, stack_name: str, template: Mapping[str, Any] | None = None) -> Topology:
    """Read the stack's functions, rules, queues and mappings from the cloud."""
    cfn = session.client("cloudformation")
    resources: list[dict[str, Any]] = []
    paginator = cfn.get_paginator("list_stack_resources")
    for page in paginator.paginate(StackName=stack_name):
        resources.extend(page.get("StackResourceSummaries", []))
    template_resources = (template or {}).get("Resources", {})
    top = Topology(stack_name)
    lam, events, sqs = session.client("lambda"), session.client("events"), session.client("sqs")
    for res in resources:
        kind, physical, logical = res.get("ResourceType"), res.get("PhysicalResourceId"), res["LogicalResourceId"]
        if not physical:
            continue
        if kind == "AWS::Lambda::Function":
            top.functions[physical] = _function(lam, physical, logical, template_resources.get(logical, {}))
        elif kind == "AWS::SQS::Queue":
            queue = _queue(sqs, physical)
            top.queues[queue.name] = queue
        elif kind == "AWS::DynamoDB::Table":
            top.tables[physical] = logical
    _async_destinations(top, resources, template_resources)
    for res in resources:
        if res.get("ResourceType") == "AWS::Events::Rule" and res.get("PhysicalResourceId"):
            rule = read_rule(events, _rule_name(res["PhysicalResourceId"]))
            top.rules[rule.name] = rule
    queue_names = {
        res.get("LogicalResourceId"): q.name
        for res in resources
        for q in top.queues.values()
        if res.get("PhysicalResourceId") == q.url
    }
    declared = {
        queue_names.get(_ref(props.get("EventSourceArn"))): props
        for props in (
            r.get("Properties", {})
            for r in template_resources.values()
            if r.get("Type") == "AWS::Lambda::EventSourceMapping"
        )
    }
    for function in top.functions.values():
        for mapping in lam.list_event_source_mappings(FunctionName=function.name).get("EventSourceMappings", []):
            top.mappings.append(_mapping(mapping, declared.get(mapping["EventSourceArn"].rsplit(":", 1)[-1], {})))
    return top


def _async_destinations(top: Topology, resources: list[dict[str, Any]], template: Mapping[str, Any]) -> None:
    # moto does not model AWS::Lambda::EventInvokeConfig; the template says where failed async
    # invocations go, so the local runtime can send them there as Lambda would.
    functions = {f.logical_id: name for name, f in top.functions.items()}
    queues = {
        res.get("LogicalResourceId"): q.arn
        for res in resources
        for q in top.queues.values()
        if res.get("PhysicalResourceId") == q.url
    }
    for res in template.values():
        if res.get("Type") != "AWS::Lambda::EventInvokeConfig":
            continue
        props = res.get("Properties", {})
        name = functions.get(_ref(props.get("FunctionName")) or "")
        destination = queues.get(_ref(props.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")))
        if name and destination:
            top.functions[name] = replace(top.functions[name], on_failure_arn=destination)


def read_rule(events: Any, name: str) -> RuleInfo:
    """One rule's live schedule, state and targets."""
    rule = events.describe_rule(Name=name)
    targets = events.list_targets_by_rule(Rule=name).get("Targets", [])
    return RuleInfo(
        name=rule["Name"],
        arn=rule["Arn"],
        schedule=rule.get("ScheduleExpression"),
        state=rule.get("State", "ENABLED"),
        targets=tuple((t["Arn"], t.get("Input")) for t in targets),
    )


def _rule_name(physical: str) -> str:
    # real CloudFormation returns "bus|name" for rules on a custom bus, the name otherwise
    return physical.split("|")[-1]


def _function(lam: Any, name: str, logical: str, template: Mapping[str, Any]) -> FunctionInfo:
    config = lam.get_function_configuration(FunctionName=name)
    code = template.get("Properties", {}).get("Code", {})
    return FunctionInfo(
        name=config["FunctionName"],
        arn=config["FunctionArn"],
        handler=config["Handler"],
        environment=dict(config.get("Environment", {}).get("Variables", {})),
        timeout_s=int(config.get("Timeout", 3)),
        memory_mb=int(config.get("MemorySize", 128)),
        logical_id=logical,
        code_key=code.get("S3Key") if isinstance(code.get("S3Key"), str) else None,
    )


def _queue(sqs: Any, url: str) -> QueueInfo:
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    redrive = json.loads(attrs["RedrivePolicy"]) if attrs.get("RedrivePolicy") else {}
    arn = attrs["QueueArn"]
    return QueueInfo(
        name=arn.rsplit(":", 1)[-1],
        url=url,
        arn=arn,
        visibility_timeout_s=int(attrs.get("VisibilityTimeout", 30)),
        dead_letter_arn=redrive.get("deadLetterTargetArn"),
        max_receive_count=int(redrive["maxReceiveCount"]) if redrive.get("maxReceiveCount") else None,
    )


def _mapping(mapping: Mapping[str, Any], declared: Mapping[str, Any]) -> MappingInfo:
    # The emulator may drop settings it does not model; the template (same source) fills them in.
    response_types = mapping.get("FunctionResponseTypes") or declared.get("FunctionResponseTypes") or []
    scaling = mapping.get("ScalingConfig") or declared.get("ScalingConfig") or {}
    state = mapping.get("State", "Enabled")
    return MappingInfo(
        uuid=mapping["UUID"],
        queue_arn=mapping["EventSourceArn"],
        function_arn=mapping["FunctionArn"],
        batch_size=int(mapping.get("BatchSize") or declared.get("BatchSize") or 10),
        max_concurrency=int(scaling["MaximumConcurrency"]) if scaling.get("MaximumConcurrency") else None,
        report_batch_item_failures="ReportBatchItemFailures" in response_types,
        enabled=state not in ("Disabled", "Disabling") and declared.get("Enabled", True) is not False,
    )


def _ref(value: Any) -> str | None:
    """The logical id an intrinsic (Ref or Fn::GetAtt) points at."""
    if isinstance(value, Mapping):
        if "Ref" in value:
            return str(value["Ref"])
        if "Fn::GetAtt" in value:
            return str(value["Fn::GetAtt"][0])
    return None
