"""Club scheduler in the synthesized template: only the Discord worker can read the Discord token or call Discord."""

from __future__ import annotations

import json

from jobfence.config import provider_env, secret_env, secret_name
from jobs.club.catalog import DISCORD_TOKEN_SECRET, NOTIFICATIONS_QUEUE, SCHEDULER_JOBS
from jobs.club.catalog import SIGNER_EVENTS, signing_secret, verify_secret
from tests.infra.cfn import as_list, env, function_of_role, of_type, role_statements

WORKER = f"jobfence-{NOTIFICATIONS_QUEUE}-worker"


def _functions(resources: dict) -> dict[str, dict]:
    return {f["Properties"]["FunctionName"]: f for f in of_type(resources, "AWS::Lambda::Function").values()}


def _secret_readers(resources: dict) -> dict[str, set[str]]:
    """Secret name -> functions whose role may call Secrets Manager on it (a wildcard counts as every secret)."""
    names = [v["Properties"]["Name"] for v in of_type(resources, "AWS::SecretsManager::Secret").values()]
    roles = function_of_role(resources)
    readers: dict[str, set[str]] = {}
    for role, statement in role_statements(resources):
        if not any(a.startswith("secretsmanager:") or a == "*" for a in as_list(statement["Action"])):
            continue
        if role not in roles:
            continue  # the break-glass role: no function (tests/infra/test_infra_policies.py)
        for target in as_list(statement["Resource"]):
            rendered = json.dumps(target)
            hit = names if target == "*" else [n for n in names if f":secret:{n}-" in rendered or f":secret:{n}\"" in rendered]
            for name in hit:
                readers.setdefault(name, set()).add(roles[role]["Properties"]["FunctionName"])
    return readers


def test_the_scheduler_roles_have_no_permission_on_the_discord_token(synthesized):
    readers = _secret_readers(synthesized.resources)
    assert readers[secret_name(DISCORD_TOKEN_SECRET)] == {WORKER}
    for job in SCHEDULER_JOBS:
        assert f"jobfence-{job.name}" not in readers[secret_name(DISCORD_TOKEN_SECRET)]
        # its own signing key, no other job's, and no verify key
        for other in SIGNER_EVENTS:
            own = other == job.name
            assert (f"jobfence-{job.name}" in readers[secret_name(signing_secret(other))]) is own, (job.name, other)
            assert f"jobfence-{job.name}" not in readers[secret_name(verify_secret(other))], (job.name, other)


def test_signing_and_verifying_are_separate_rights(synthesized):
    # Each job holds its own private key; the worker only the public ones, so a compromised worker cannot sign
    # and a compromised job cannot sign as another. Besides them only the rotation function
    # (tests/infra/test_infra_security.py) touches the pairs.
    readers = _secret_readers(synthesized.resources)
    rotator = "jobfence-rotate_signing_key"
    assert set(SIGNER_EVENTS) == {job.name for job in SCHEDULER_JOBS}
    for job in SIGNER_EVENTS:
        assert readers[secret_name(signing_secret(job))] == {f"jobfence-{job}", rotator}, job
        assert readers[secret_name(verify_secret(job))] == {WORKER, rotator}, job


def test_the_scheduler_functions_have_no_discord_token_name_or_url(synthesized):
    functions = _functions(synthesized.resources)
    for job in SCHEDULER_JOBS:
        variables = env(functions[f"jobfence-{job.name}"])
        assert secret_env(DISCORD_TOKEN_SECRET) not in variables, job.name
        assert provider_env("discord") not in variables, job.name
    worker = env(functions[WORKER])
    assert worker[secret_env(DISCORD_TOKEN_SECRET)] == secret_name(DISCORD_TOKEN_SECRET)
    assert provider_env("discord") in worker


def test_seven_club_rules_every_thirty_minutes_and_the_intake_every_five(synthesized):
    rules = [r["Properties"].get("ScheduleExpression") for r in of_type(synthesized.resources, "AWS::Events::Rule").values()]
    assert rules.count("cron(0/30 * * * ? *)") == len(SCHEDULER_JOBS) == 7  # one rule per job, none shared
    assert "rate(5 minutes)" in rules
    functions = _functions(synthesized.resources)
    for job in SCHEDULER_JOBS:
        assert functions[f"jobfence-{job.name}"]["Properties"]["Handler"] == "handlers.scheduled.handler"
    assert functions[WORKER]["Properties"]["Handler"] == "handlers.discord.handler"
