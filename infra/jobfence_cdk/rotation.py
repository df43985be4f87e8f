"""The signing keys' rotation: a rotation schedule on each signing secret, and one rotation function.

Each (signing, verify) pair of `signing_keys` (the club: one per publishing job,
`<prefix>/club_signing_key_<job>`) is rotated every `ROTATION_DAYS` (and once
right after the first deploy, which replaces CloudFormation's placeholder with
a real pair): Secrets Manager calls `handlers.rotate_signing_key` for each step
with the signing secret's id, and the function writes the public half to that
pair's verify secret first (`jobs.club.rotation`). So `AwsSolutions-SMG4` is
met for the keys jobfence owns. The function may read and stage the signing
secrets and read and put the verify secrets, nothing else; only Secrets
Manager of this account, rotating one of those signing secrets (one permission
per secret, with `SourceAccount` and `SourceArn`), may invoke it. The verify
secrets (public keys, rewritten by this rotation) and the third-party
credentials keep their acknowledgement (`infra/jobfence_cdk/secrets.py`).

The break-glass role (`CatalogSecrets.break_glass`) may start a rotation now
(`RotateSecret` on a signing secret, and `lambda:InvokeFunction` on this
function, which `RotateSecret` requires of its caller) and revoke the
rotated-out public key (`UpdateSecretVersionStage` on a verify secret): the
leak runbook (docs/security.md, `ops.rotation`). It reads no secret.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from jobfence.config import secret_env, secret_name
from jobfence_cdk.code import FunctionCode
from jobfence_cdk.function import ServiceFunction
from jobfence_cdk.secrets import CatalogSecrets
from jobfence_cdk.tables import pascal

ROTATION_DAYS = 30
ROTATION_FUNCTION = "rotate_signing_key"  # the function is "<prefix>-rotate_signing_key"
HANDLER = "handlers.rotate_signing_key.handler"
SIGNING_ACTIONS = (
    "secretsmanager:DescribeSecret",
    "secretsmanager:GetSecretValue",
    "secretsmanager:PutSecretValue",
    "secretsmanager:UpdateSecretVersionStage",
)
VERIFY_ACTIONS = ("secretsmanager:GetSecretValue", "secretsmanager:PutSecretValue")
BREAK_GLASS_SIGNING_ACTIONS = ("secretsmanager:DescribeSecret", "secretsmanager:RotateSecret")
BREAK_GLASS_VERIFY_ACTIONS = ("secretsmanager:DescribeSecret", "secretsmanager:UpdateSecretVersionStage")


class SigningKeyRotation(Construct):
    """Rotates each pair of `signing_keys` ((signing secret, verify secret), ...). Attributes: `function`, `role`,
    `schedules` (signing secret -> its rotation schedule)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: FunctionCode,
        prefix: str,
        secrets: CatalogSecrets,
        signing_keys: Sequence[tuple[str, str]],
    ) -> None:
        super().__init__(scope, construct_id)
        names = [name for pair in signing_keys for name in pair]
        service = ServiceFunction(
            self,
            "Function",
            code=code,
            function_name=f"{prefix}-{ROTATION_FUNCTION}",
            handler=HANDLER,
            timeout_s=30,
            memory_mb=256,
            environment={"POWERTOOLS_SERVICE_NAME": "club", **{secret_env(n): secret_name(n, prefix) for n in names}},
            description="rotates the club event signing pairs (Secrets Manager's four steps, public half first)",
            caller="Secrets Manager's rotation, which marks a failed step and retries the rotation",
        )
        self.function, self.role = service.function, service.role
        # by their fixed names, as the catalog grants: the real ARN ends in "-" and six random characters
        signing_arns = [f"{secrets.grantable[s].secret_arn}-??????" for s, _ in signing_keys]
        verify_arns = [f"{secrets.grantable[v].secret_arn}-??????" for _, v in signing_keys]
        for arns, actions in ((signing_arns, SIGNING_ACTIONS), (verify_arns, VERIFY_ACTIONS)):
            self.role.add_to_policy(iam.PolicyStatement(actions=list(actions), resources=arns))
        if secrets.break_glass is not None:
            for arns, actions in (
                (signing_arns, BREAK_GLASS_SIGNING_ACTIONS),
                (verify_arns, BREAK_GLASS_VERIFY_ACTIONS),
            ):
                secrets.break_glass.add_to_policy(iam.PolicyStatement(actions=list(actions), resources=arns))
            secrets.break_glass.add_to_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
            )
        self.schedules: dict[str, secretsmanager.CfnRotationSchedule] = {}
        for signing, _ in signing_keys:
            # Secrets Manager of this account, rotating this very secret (confused deputy: not another secret's
            # rotation configured with this function by someone allowed to call RotateSecret elsewhere)
            permission = f"SecretsManagerInvokes{pascal(signing)}"
            self.function.add_permission(
                permission,
                principal=iam.ServicePrincipal("secretsmanager.amazonaws.com"),
                source_account=Aws.ACCOUNT_ID,
                source_arn=secrets.secrets[signing].secret_arn,
            )
            schedule = secretsmanager.CfnRotationSchedule(
                self,
                f"Schedule{pascal(signing)}",
                secret_id=secrets.secrets[signing].secret_arn,
                rotation_lambda_arn=self.function.function_arn,
                rotation_rules=secretsmanager.CfnRotationSchedule.RotationRulesProperty(
                    automatically_after_days=ROTATION_DAYS
                ),
            )
            # Secrets Manager checks at creation that it may invoke the function.
            schedule.node.add_dependency(self.function.permissions_node.find_child(permission))
            self.schedules[signing] = schedule
