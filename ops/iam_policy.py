"""Offline evaluation of a synthesized template's IAM policies: may this role make this call on this resource?

moto evaluates no resource policy (and by default no identity policy), so a
test that a runbook works against the deployed policies needs its own
evaluator. This one reads the synthesized CloudFormation JSON and decides a
request `(principal, action, resource)` the way IAM decides a request inside
one account:

    explicit Deny in the identity policies or the resource policy   -> DENY
    else an Allow in the identity policies OR the resource policy   -> ALLOW
    else                                                            -> IMPLICIT_DENY

What it understands, which is what the template uses:

- identity policies: the roles' `AWS::IAM::Policy` resources and inline `Policies`;
- resource policies: `AWS::SecretsManager::ResourcePolicy` (by the secret it names),
  `AWS::SNS::TopicPolicy` (by its topics), a `AWS::KMS::Key`'s key policy, each
  `AWS::Lambda::Permission` as the statement Lambda adds to the function's policy
  (`SourceAccount` / `SourceArn` as the `aws:SourceAccount` / `aws:SourceArn` conditions
  a service principal's request carries), and each role's trust policy
  (`AssumeRolePolicyDocument`, the resource policy of the role's ARN);
- `Action` / `NotAction`, `Resource` / `NotResource` with `*` and `?` wildcards
  (actions case-insensitive, resources case-sensitive);
- `Principal` / `NotPrincipal` of `"*"`, `{"AWS": ...}` (a role ARN, `"*"`, or
  the account root, which in a same-account resource policy only delegates to
  IAM: it matches a Deny but grants nothing) and `{"Service": ...}`;
- conditions `String*`, `Arn*` (with `IfExists`, `ForAllValues:`,
  `ForAnyValue:`), `Bool` and `Null` on the keys a request carries
  (`aws:PrincipalArn`, `aws:PrincipalAccount`, `aws:PrincipalType`,
  `aws:PrincipalTag/<key>` of a session's tags (`Template.session`) and any key
  the caller passes, such as `dynamodb:LeadingKeys` or `aws:RequestTag/<key>`);
  a policy variable `${key}` in a condition value is replaced by the request's
  value of `key` (a single-valued one), and matches nothing when the request
  lacks it; a key the request lacks makes a positive operator false
  and a negated one (`StringNotEquals`, `ArnNotLike`, ...) true, as in IAM;
  any other operator raises `Unsupported`, so nothing is silently misjudged;
- references: `Ref`, `Fn::GetAtt`, `Fn::Join`, `Fn::Sub` and the pseudo
  parameters, resolved to ARNs in one fixed account and region: a role's ARN
  is `arn:aws:iam::<account>:role/<logical id>`, a secret's
  `...:secret:<Name>-AbCdEf` (the six random characters Secrets Manager adds),
  a function's `...:function:<FunctionName>`, a topic's `...:sns:<region>:<account>:<TopicName>`.

Not modelled (none is in the template): permission boundaries, SCPs, session
policies, the keys of the secrets (AWS managed), cross-account requests.
"""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

Value: TypeAlias = "str | tuple[str, ...]"  # a request context key's value (a tuple: multi-valued)
SECRET_SUFFIX = "AbCdEf"  # Secrets Manager appends "-" and six random characters to a secret's ARN


class Unsupported(ValueError):
    """A policy construct this evaluator does not model (never guessed)."""


class Decision(str, enum.Enum):
    ALLOW = "allow"
    DENY = "deny"  # an explicit Deny matched
    IMPLICIT_DENY = "implicit_deny"  # nothing allowed it


@dataclass(frozen=True)
class Account:
    """Where the template is evaluated as deployed."""

    account_id: str = "123456789012"
    region: str = "us-east-1"
    partition: str = "aws"

    @property
    def root(self) -> str:
        return f"arn:{self.partition}:iam::{self.account_id}:root"

    def role_arn(self, name: str) -> str:
        return f"arn:{self.partition}:iam::{self.account_id}:role/{name}"


@dataclass(frozen=True)
class Principal:
    """A caller: a role's ARN, the template role it is (or None for a role from elsewhere) and any identity
    statements it holds besides the template's (a broad policy attached elsewhere in the account)."""

    arn: str
    role: str | None = None
    extra: tuple[Mapping[str, Any], ...] = ()
    service: str | None = None  # a service principal ("secretsmanager.amazonaws.com") instead of a role
    tags: Mapping[str, str] = field(default_factory=dict)  # a session's tags (aws:PrincipalTag/<key>)


@dataclass(frozen=True)
class Statement:
    effect: str
    actions: tuple[str, ...] = ()
    not_actions: tuple[str, ...] | None = None
    resources: tuple[str, ...] = ("*",)
    not_resources: tuple[str, ...] | None = None
    principals: Mapping[str, tuple[str, ...]] | None = None  # resource policies only
    not_principals: Mapping[str, tuple[str, ...]] | None = None
    conditions: Mapping[str, Mapping[str, tuple[str, ...]]] = field(default_factory=dict)


class Template:
    """A synthesized template's roles, secrets and their policies, references resolved in `account`."""

    def __init__(self, template: Mapping[str, Any], account: Account = Account()) -> None:
        self.account = account
        self.resources: Mapping[str, Any] = template["Resources"]
        self._identity: dict[str, list[Statement]] = {}
        self._resource: dict[str, list[Statement]] = {}  # resource ARN -> its resource policy
        for logical, resource in self.resources.items():
            kind, properties = resource["Type"], resource.get("Properties", {})
            if kind == "AWS::IAM::Policy":
                for role in properties.get("Roles", []):
                    self._identity.setdefault(self._logical(role), []).extend(
                        self.statements(properties["PolicyDocument"])
                    )
            elif kind == "AWS::IAM::Role":
                self._identity.setdefault(logical, [])
                trust = properties.get("AssumeRolePolicyDocument")
                if trust:
                    self._resource.setdefault(self.arn(logical), []).extend(self.statements(trust))
                for policy in properties.get("Policies", []):
                    self._identity[logical].extend(self.statements(policy["PolicyDocument"]))
            elif kind == "AWS::SecretsManager::ResourcePolicy":
                arn = self.resolve(properties["SecretId"])
                self._resource.setdefault(str(arn), []).extend(self.statements(properties["ResourcePolicy"]))
            elif kind == "AWS::SNS::TopicPolicy":
                for topic in properties["Topics"]:
                    self._resource.setdefault(str(self.resolve(topic)), []).extend(
                        self.statements(properties["PolicyDocument"])
                    )
            elif kind == "AWS::KMS::Key":  # in a key policy, Resource "*" is this key
                self._resource.setdefault(self.arn(logical), []).extend(self.statements(properties["KeyPolicy"]))
            elif kind == "AWS::Lambda::Permission":
                function = str(self.resolve(properties["FunctionName"]))
                if not function.startswith("arn:"):
                    a = self.account
                    function = f"arn:{a.partition}:lambda:{a.region}:{a.account_id}:function:{function}"
                self._resource.setdefault(function, []).append(self._permission(properties, function))

    # -- the template's things, by logical id ---------------------------------------------------------
    def of_type(self, kind: str) -> dict[str, Any]:
        return {k: v for k, v in self.resources.items() if v["Type"] == kind}

    def role(self, logical: str, *extra: Mapping[str, Any]) -> Principal:
        """The template role `logical` as a caller (with `extra` identity statements, if any)."""
        if self.resources.get(logical, {}).get("Type") != "AWS::IAM::Role":
            raise KeyError(f"{logical} is not a role of the template")
        return Principal(self.arn(logical), logical, tuple(extra))

    def session(self, logical: str, **tags: str) -> Principal:
        """A session of the template role `logical` (assumed with `tags` as its session tags)."""
        return Principal(self.arn(logical), logical, (), tags=dict(tags))

    def foreign(self, name: str, *extra: Mapping[str, Any]) -> Principal:
        """A role of the same account that the template does not define."""
        return Principal(self.account.role_arn(name), None, tuple(extra))

    def arn(self, logical: str) -> str:
        """The ARN the resource `logical` gets when deployed."""
        return str(self.resolve({"Fn::GetAtt": [logical, "Arn"]}))

    def identity_statements(self, principal: Principal) -> list[Statement]:
        own = self._identity.get(principal.role, []) if principal.role else []
        return [*own, *(self.statement(s) for s in principal.extra)]

    def resource_statements(self, resource_arn: str) -> list[Statement]:
        return self._resource.get(resource_arn, [])

    # -- deciding -------------------------------------------------------------------------------------
    def decide(
        self, principal: Principal, action: str, resource: str, context: Mapping[str, Value] | None = None
    ) -> Decision:
        """IAM's decision for one same-account request; `resource` is an ARN (`arn`) or a logical id."""
        arn = resource if resource.startswith("arn:") else self.arn(resource)
        keys: dict[str, Value] = {**self._principal_keys(principal), **(context or {})}
        identity = [] if principal.service else self.identity_statements(principal)
        on_resource = self.resource_statements(arn)
        matched = [s for s in identity if _applies(s, action, arn, keys)]
        matched += [s for s in on_resource if _applies(s, action, arn, keys) and self._names(s, principal)]
        if any(s.effect == "Deny" for s in matched):
            return Decision.DENY
        if any(s.effect == "Allow" and (s.principals is None or self._grants(s, principal)) for s in matched):
            return Decision.ALLOW
        return Decision.IMPLICIT_DENY

    def _principal_keys(self, principal: Principal) -> dict[str, str]:
        if principal.service:
            return {}
        return {
            "aws:PrincipalArn": principal.arn,
            "aws:PrincipalAccount": principal.arn.split(":")[4],
            "aws:PrincipalType": "AssumedRole",
            **{f"aws:PrincipalTag/{k}": v for k, v in principal.tags.items()},
        }

    def _names(self, statement: Statement, principal: Principal) -> bool:
        """Whether a resource policy statement's Principal / NotPrincipal covers `principal`."""
        if statement.not_principals is not None:
            return not _in_principals(statement.not_principals, principal, self.account)
        if statement.principals is None:
            raise Unsupported("a resource policy statement without Principal or NotPrincipal")
        return _in_principals(statement.principals, principal, self.account)

    def _grants(self, statement: Statement, principal: Principal) -> bool:
        """An Allow naming only the account root delegates to IAM: it grants nothing by itself."""
        aws = (statement.principals or {}).get("AWS", ())
        return not (aws and set(aws) == {self.account.root} and not principal.service)

    # -- reading policies -----------------------------------------------------------------------------
    def statements(self, document: Mapping[str, Any]) -> list[Statement]:
        return [self.statement(s) for s in _as_list(document.get("Statement", []))]

    def statement(self, raw: Mapping[str, Any]) -> Statement:
        known = {
            "Sid",
            "Effect",
            "Action",
            "NotAction",
            "Resource",
            "NotResource",
            "Principal",
            "NotPrincipal",
            "Condition",
        }
        if set(raw) - known:
            raise Unsupported(f"statement keys {sorted(set(raw) - known)}")
        if raw["Effect"] not in ("Allow", "Deny"):
            raise Unsupported(f"Effect {raw['Effect']!r}")
        conditions = {
            operator: {key: self._strings(value) for key, value in block.items()}
            for operator, block in raw.get("Condition", {}).items()
        }
        return Statement(
            effect=raw["Effect"],
            actions=self._strings(raw.get("Action", [])),
            not_actions=self._strings(raw["NotAction"]) if "NotAction" in raw else None,
            resources=self._strings(raw.get("Resource", "*")),
            not_resources=self._strings(raw["NotResource"]) if "NotResource" in raw else None,
            principals=self._principals(raw["Principal"]) if "Principal" in raw else None,
            not_principals=self._principals(raw["NotPrincipal"]) if "NotPrincipal" in raw else None,
            conditions=conditions,
        )

    def _permission(self, properties: Mapping[str, Any], function: str) -> Statement:
        """A Lambda permission as the statement Lambda adds to the function's resource policy."""
        unknown = set(properties) - {"Action", "FunctionName", "Principal", "SourceAccount", "SourceArn"}
        if unknown:
            raise Unsupported(f"Lambda permission keys {sorted(unknown)}")
        principal = str(self.resolve(properties["Principal"]))
        conditions: dict[str, dict[str, tuple[str, ...]]] = {}
        if "SourceAccount" in properties:
            conditions["StringEquals"] = {"aws:SourceAccount": self._strings(properties["SourceAccount"])}
        if "SourceArn" in properties:
            conditions["ArnLike"] = {"aws:SourceArn": self._strings(properties["SourceArn"])}
        kind = "Service" if principal.endswith(".amazonaws.com") else "AWS"
        return Statement(
            effect="Allow",
            actions=self._strings(properties["Action"]),
            resources=(function,),
            principals={kind: (principal,)},
            conditions=conditions,
        )

    def _principals(self, value: Any) -> Mapping[str, tuple[str, ...]]:
        if value == "*":
            return {"AWS": ("*",)}
        return {kind: self._strings(names) for kind, names in value.items()}

    def _strings(self, value: Any) -> tuple[str, ...]:
        return tuple(str(self.resolve(v)) for v in _as_list(value))

    def _logical(self, value: Any) -> str:
        if isinstance(value, dict) and "Ref" in value:
            return str(value["Ref"])
        raise Unsupported(f"a policy's role given as {value!r}")

    # -- references -----------------------------------------------------------------------------------
    def resolve(self, value: Any) -> Any:
        """A template value with every reference replaced by what it is when deployed in `account`."""
        if isinstance(value, str | int | float | bool):
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if not isinstance(value, dict) or len(value) != 1:
            raise Unsupported(f"template value {str(value)[:80]}")
        ((function, argument),) = value.items()
        if function == "Ref":
            return self._ref(argument)
        if function == "Fn::GetAtt":
            logical, attribute = argument if isinstance(argument, list) else argument.split(".", 1)
            return self._get_att(logical, attribute)
        if function == "Fn::Join":
            separator, parts = argument
            return separator.join(str(self.resolve(p)) for p in parts)
        if function == "Fn::Sub":
            if not isinstance(argument, str):
                raise Unsupported("Fn::Sub with a variable map")
            return re.sub(r"\$\{([^}]+)\}", lambda m: str(self._sub(m.group(1))), argument)
        raise Unsupported(f"intrinsic {function}")

    def _sub(self, name: str) -> Any:
        if "." in name:
            logical, attribute = name.split(".", 1)
            return self._get_att(logical, attribute)
        return self._ref(name)

    def _ref(self, name: str) -> str:
        pseudo = {
            "AWS::AccountId": self.account.account_id,
            "AWS::Region": self.account.region,
            "AWS::Partition": self.account.partition,
            "AWS::URLSuffix": "amazonaws.com",
        }
        if name in pseudo:
            return pseudo[name]
        resource = self.resources.get(name)
        if resource is None:
            raise Unsupported(f"Ref to {name!r}, not a resource of the template")
        if resource["Type"] == "AWS::SecretsManager::Secret":  # a secret's Ref is its ARN
            return self._secret_arn(name)
        if resource["Type"] == "AWS::SNS::Topic":  # so is a topic's
            a, topic = self.account, resource.get("Properties", {}).get("TopicName", name)
            return f"arn:{a.partition}:sns:{a.region}:{a.account_id}:{topic}"
        return str(resource.get("Properties", {}).get(_NAME_PROPERTY.get(resource["Type"], ""), name))

    def _get_att(self, logical: str, attribute: str) -> str:
        resource = self.resources.get(logical)
        if resource is None:
            raise Unsupported(f"Fn::GetAtt of {logical!r}, not a resource of the template")
        if attribute != "Arn":
            return f"{logical}.{attribute}"
        kind, a = resource["Type"], self.account
        if kind == "AWS::IAM::Role":
            return a.role_arn(logical)
        if kind == "AWS::SecretsManager::Secret":
            return self._secret_arn(logical)
        if kind == "AWS::Lambda::Function":
            return f"arn:{a.partition}:lambda:{a.region}:{a.account_id}:function:{self._ref(logical)}"
        service = kind.split("::")[1].lower()
        return f"arn:{a.partition}:{service}:{a.region}:{a.account_id}:{logical}"

    def _secret_arn(self, logical: str) -> str:
        a, name = self.account, self.resources[logical]["Properties"]["Name"]
        return f"arn:{a.partition}:secretsmanager:{a.region}:{a.account_id}:secret:{name}-{SECRET_SUFFIX}"

    def secret_arn(self, name: str) -> str:
        """The deployed ARN of the secret named `name` (its physical name, "<prefix>/<logical>")."""
        for logical, resource in self.of_type("AWS::SecretsManager::Secret").items():
            if resource["Properties"]["Name"] == name:
                return self._secret_arn(logical)
        raise KeyError(f"no secret named {name!r} in the template")


_NAME_PROPERTY = {
    "AWS::Lambda::Function": "FunctionName",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SQS::Queue": "QueueName",
}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _glob(pattern: str, value: str, *, case: bool) -> bool:
    if not case:
        pattern, value = pattern.lower(), value.lower()
    # IAM wildcards are only "*" and "?": escape fnmatch's character classes
    return fnmatch.fnmatchcase(value, pattern.replace("[", "[[]"))


def _applies(statement: Statement, action: str, resource: str, keys: Mapping[str, Value]) -> bool:
    if statement.not_actions is not None:
        if any(_glob(p, action, case=False) for p in statement.not_actions):
            return False
    elif not any(_glob(p, action, case=False) for p in statement.actions):
        return False
    if statement.not_resources is not None:
        if any(_glob(p, resource, case=True) for p in statement.not_resources):
            return False
    elif not any(_glob(p, resource, case=True) for p in statement.resources):
        return False
    return all(
        _condition(op, key, values, keys) for op, block in statement.conditions.items() for key, values in block.items()
    )


def _in_principals(principals: Mapping[str, tuple[str, ...]], principal: Principal, account: Account) -> bool:
    if principal.service:
        return principal.service in principals.get("Service", ()) or "*" in principals.get("AWS", ())
    for name in principals.get("AWS", ()):
        if name == "*" or name == principal.arn:
            return True
        if name in (account.root, account.account_id) and principal.arn.split(":")[4] == account.account_id:
            return True
    return False


_STRING_OPERATORS = {
    "StringEquals": (False, lambda p, v: p == v),
    "StringNotEquals": (True, lambda p, v: p == v),
    "StringEqualsIgnoreCase": (False, lambda p, v: p.lower() == v.lower()),
    "StringNotEqualsIgnoreCase": (True, lambda p, v: p.lower() == v.lower()),
    "StringLike": (False, lambda p, v: _glob(p, v, case=True)),
    "StringNotLike": (True, lambda p, v: _glob(p, v, case=True)),
    "ArnEquals": (False, lambda p, v: p == v),
    "ArnNotEquals": (True, lambda p, v: p == v),
    "ArnLike": (False, lambda p, v: _glob(p, v, case=True)),
    "ArnNotLike": (True, lambda p, v: _glob(p, v, case=True)),
    "Bool": (False, lambda p, v: p.lower() == v.lower()),
}


_VARIABLE = re.compile(r"\$\{([^}]+)\}")


def _substituted(values: Sequence[str], keys: Mapping[str, Value]) -> list[str]:
    """Condition values with their policy variables replaced; a value naming a key the request lacks is dropped."""
    out = []
    for value in values:
        names = _VARIABLE.findall(value)
        if any(name in ("*", "?", "$") for name in names):
            raise Unsupported(f"a literal escape in {value!r}")
        if any(not isinstance(keys.get(name), str) for name in names):
            continue  # unknown or multi-valued: the variable cannot be resolved, the value matches nothing
        out.append(_VARIABLE.sub(lambda m: str(keys[m.group(1)]), value))
    return out


def _condition(operator: str, key: str, values: Sequence[str], keys: Mapping[str, Value]) -> bool:
    """One condition key under one operator (the values of one key are ORed, as in IAM)."""
    values = _substituted(values, keys)
    if operator == "Null":
        present = key in keys
        return all((v.lower() == "true") != present for v in values)
    quantifier, _, name = operator.rpartition(":")
    if_exists = name.endswith("IfExists")
    name = name.removesuffix("IfExists")
    if name not in _STRING_OPERATORS or quantifier not in ("", "ForAllValues", "ForAnyValue"):
        raise Unsupported(f"condition operator {operator}")
    negated, match = _STRING_OPERATORS[name]
    if quantifier and negated:
        raise Unsupported(f"condition operator {operator}")  # set semantics of a negated operator: not used
    if key not in keys:
        if if_exists or quantifier == "ForAllValues":
            return True
        return negated and not quantifier
    value = keys[key]
    if not quantifier:
        if not isinstance(value, str):
            raise Unsupported(f"{operator} on the multi-valued key {key}")
        found = any(match(p, value) for p in values)
        return not found if negated else found
    request_values = (value,) if isinstance(value, str) else value
    hits = [any(match(p, v) for p in values) for v in request_values]
    return all(hits) if quantifier == "ForAllValues" else any(hits)
