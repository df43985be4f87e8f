"""May this console act? Read-only detection for a real account, read-only when unsure.

Against the local runtime the operator owns everything: the console may act.
Against a real account the console asks IAM's policy simulator
(`iam:SimulatePrincipalPolicy`) whether the caller's principal may make
every API call behind its four actions, on the deployed resources:

- run now:        lambda:InvokeFunction on the job functions
- disable/enable: events:DisableRule, events:EnableRule on the job rules,
                  dynamodb:UpdateItem on the leases table (the toggle record)
- retry failed:   dynamodb:UpdateItem, dynamodb:TransactWriteItems on the work
                  tables, sqs:SendMessage on the wake-up queues
- every action:   dynamodb:PutItem on the audit table (`jobfence_ops.audit`)

The caller is STS's answer; an assumed role's session is simulated as its
role (`iam:GetRole` gives the role's ARN with its path). Any call that is not
`allowed`, or any error on the way (no permission to simulate, an unknown
principal kind such as root or a federated user), makes the console
read-only, and the reason is printed in its header. The simulator evaluates
the principal's identity policies and permission boundary; service control
policies and resource policies can still refuse an action it allows (the
action then fails as one line, and nothing is written).

The simulator is a port (`PolicySimulator`): `IamSimulator` calls IAM; a test
can pass its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError
from botocore.parsers import ResponseParserError

from jobfence.dynamo import error_code
from jobfence_ops.commands.batches import work_resources
from jobfence_ops.targets import AwsTarget, OperatorError, Target

ALLOWED = "allowed"


@dataclass(frozen=True)
class Access:
    """Whether the console may act, and the reason shown to the operator."""

    may_act: bool
    reason: str


@dataclass(frozen=True)
class Need:
    """The API calls behind one console action, on the resources it touches."""

    action: str
    calls: tuple[str, ...]
    resources: tuple[str, ...]


class PolicySimulator(Protocol):
    def decisions(self, principal_arn: str, calls: tuple[str, ...], resources: tuple[str, ...]) -> dict[str, str]:
        """Each call's worst decision over the resources: allowed | implicitDeny | explicitDeny."""
        ...


class IamSimulator:
    """IAM's policy simulator over a boto3 session."""

    def __init__(self, session: Any) -> None:
        self.iam = session.client("iam")

    def decisions(self, principal_arn: str, calls: tuple[str, ...], resources: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {}
        pages = self.iam.get_paginator("simulate_principal_policy").paginate(
            PolicySourceArn=principal_arn, ActionNames=list(calls), ResourceArns=list(resources)
        )
        for page in pages:
            for result in page.get("EvaluationResults", []):
                name, decision = result["EvalActionName"], result["EvalDecision"]
                details = result.get("ResourceSpecificResults") or []
                worst = next(
                    (d["EvalResourceDecision"] for d in details if d["EvalResourceDecision"] != ALLOWED), decision
                )
                if out.get(name, ALLOWED) == ALLOWED:
                    out[name] = worst
        return out


def principal_of(session: Any) -> tuple[str, str, str]:
    """(the principal to simulate, its partition, its account) from STS; an assumed role becomes its role."""
    arn = str(session.client("sts").get_caller_identity()["Arn"])
    parts = arn.split(":", 5)
    if len(parts) != 6:
        raise OperatorError(f"an unexpected caller ARN {arn!r}")
    _, partition, service, _, account, resource = parts
    if service == "iam" and resource.startswith("user/"):
        return arn, partition, account
    if service == "sts" and resource.startswith("assumed-role/"):
        role = resource.split("/")[1]
        return str(session.client("iam").get_role(RoleName=role)["Role"]["Arn"]), partition, account
    raise OperatorError(
        f"the caller {arn} is neither an IAM user nor an assumed role: its permissions cannot be simulated"
    )


def needs(target: Target, partition: str, account: str) -> list[Need]:
    """What each console action calls, on which deployed resources."""
    top = target.topology
    region = target.session.region_name

    def table_arn(name: str) -> str:
        return f"arn:{partition}:dynamodb:{region}:{account}:table/{name}"

    tables, queues = work_resources(target)
    queue_arns = tuple(q.arn for q in top.queues.values() if q.url in queues or q.name in queues)
    out = [Need("run now", ("lambda:InvokeFunction",), tuple(sorted(f.arn for f in top.job_functions().values())))]
    rules = tuple(sorted(r.arn for r in top.job_rules().values()))
    out.append(Need("disable and enable", ("events:DisableRule", "events:EnableRule"), rules))
    if top.leases_table:
        out.append(Need("disable and enable", ("dynamodb:UpdateItem",), (table_arn(top.leases_table),)))
    out.append(
        Need(
            "retry failed", ("dynamodb:UpdateItem", "dynamodb:TransactWriteItems"), tuple(table_arn(t) for t in tables)
        )
    )
    if queue_arns:
        out.append(Need("retry failed", ("sqs:SendMessage",), queue_arns))
    if top.audit_table:  # every action is recorded: a console that cannot record acts for no one
        out.append(Need("record in the audit table", ("dynamodb:PutItem",), (table_arn(top.audit_table),)))
    return [n for n in out if n.resources]


def detect(target: Target, simulator: PolicySimulator | None = None) -> Access:
    """May the console act against this target? Read-only, with the reason, unless every call is allowed."""
    if not isinstance(target, AwsTarget):
        return Access(True, f"the operator's own runtime ({target.name})")
    try:
        principal, partition, account = principal_of(target.session)
        simulate = simulator or IamSimulator(target.session)
        for need in needs(target, partition, account):
            decisions = simulate.decisions(principal, need.calls, need.resources)
            refused = [call for call in need.calls if decisions.get(call) != ALLOWED]
            if refused:
                verdict = decisions.get(refused[0], "no decision")
                return Access(
                    False, f"{principal} may not {refused[0]} ({need.action}): {verdict} by IAM's policy simulator"
                )
    except (ClientError, BotoCoreError, ResponseParserError) as exc:  # a service that answers garbage: unsure too
        return Access(False, f"could not check the caller's permissions ({error_code(exc)}); read-only when unsure")
    except OperatorError as exc:
        return Access(False, f"{exc}; read-only when unsure")
    return Access(True, f"{principal} may run, retry, disable and enable (IAM's policy simulator)")
