"""Reading a synthesized CloudFormation template in tests: resources by type, references."""

from __future__ import annotations

from typing import Iterator


def of_type(resources: dict, kind: str) -> dict:
    """The resources of one CloudFormation type, by logical id."""
    return {k: v for k, v in resources.items() if v["Type"] == kind}


def ref_id(value) -> str | None:
    """The logical id behind {"Fn::GetAtt": [id, ...]}, {"Ref": id}, or a Join starting with one."""
    if not isinstance(value, dict):
        return None
    if "Fn::GetAtt" in value:
        return value["Fn::GetAtt"][0]
    if "Ref" in value:
        return value["Ref"]
    if "Fn::Join" in value:
        parts = value["Fn::Join"][1]
        return ref_id(parts[0]) if parts else None
    return None


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def env(function: dict) -> dict:
    """A function resource's environment variables."""
    return function["Properties"].get("Environment", {}).get("Variables", {})


def role_statements(resources: dict) -> Iterator[tuple[str, dict]]:
    """(role logical id, statement) for every inline/attached IAM policy statement."""
    for policy in of_type(resources, "AWS::IAM::Policy").values():
        for role in policy["Properties"].get("Roles", []):
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                yield ref_id(role), statement
    for role_id, role in of_type(resources, "AWS::IAM::Role").items():
        for policy in role["Properties"].get("Policies", []):
            for statement in policy["PolicyDocument"]["Statement"]:
                yield role_id, statement


def function_of_role(resources: dict) -> dict[str, dict]:
    """Role logical id -> the function resource that assumes it."""
    return {ref_id(f["Properties"]["Role"]): f for f in of_type(resources, "AWS::Lambda::Function").values()}
