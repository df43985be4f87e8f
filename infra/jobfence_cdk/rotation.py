"""The signing key's rotation: a rotation schedule on the signing secret and its rotation function.

Secrets Manager rotates `<prefix>/club_event_signing_key` every `ROTATION_DAYS`
(and once right after the first deploy, which replaces CloudFormation's
placeholder with a real pair) by calling `handlers.rotate_signing_key` for
each step; the function writes the public half to the verify secret first
(`jobs.club.rotation`). So `AwsSolutions-SMG4` is met for the key jobfence
owns. The function may read and stage the signing secret and read and put the
verify secret, nothing else; only Secrets Manager of this account, rotating
the signing secret (`SourceAccount` and `SourceArn`), may invoke it. The
verify secret (a public key, rewritten by this rotation) and the third-party
credentials keep their acknowledgement (`infra/jobfence_cdk/secrets.py`).

The break-glass role (`CatalogSecrets.break_glass`) may start a rotation now
(`RotateSecret` on the signing secret, and `lambda:InvokeFunction` on this
function, which `RotateSecret` requires of its caller) and revoke the
rotated-out public key (`UpdateSecretVersionStage` on the verify secret): the
leak runbook (docs/security.md, `ops.rotation`). It reads neither secret.
"""

from __future__ import annotations

from aws_cdk import Aws
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from jobfence.config import secret_env, secret_name
from jobfence_cdk.code import FunctionCode
from jobfence_cdk.function import ServiceFunction
from jobfence_cdk.secrets import CatalogSecrets

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
    """Rotates `signing_keys` (the signing secret, the verify secret). Attributes: `function`, `role`."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        code: FunctionCode,
        prefix: str,
        secrets: CatalogSecrets,
        signing_keys: tuple[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        signing, verify = signing_keys
        service = ServiceFunction(
            self,
            "Function",
            code=code,
            function_name=f"{prefix}-{ROTATION_FUNCTION}",
            handler=HANDLER,
            timeout_s=30,
            memory_mb=256,
            environment={
                "POWERTOOLS_SERVICE_NAME": "club",
                secret_env(signing): secret_name(signing, prefix),
                secret_env(verify): secret_name(verify, prefix),
            },
            description="rotates the club event signing pair (Secrets Manager's four steps, public half first)",
            caller="Secrets Manager's rotation, which marks a failed step and retries the rotation",
        )
        self.function, self.role = service.function, service.role
        for name, actions in ((signing, SIGNING_ACTIONS), (verify, VERIFY_ACTIONS)):
            # by its fixed name, as the catalog grants: the real ARN ends in "-" and six random characters
            self.role.add_to_policy(
                iam.PolicyStatement(actions=list(actions), resources=[f"{secrets.grantable[name].secret_arn}-??????"])
            )
        if secrets.break_glass is not None:
            for name, actions in ((signing, BREAK_GLASS_SIGNING_ACTIONS), (verify, BREAK_GLASS_VERIFY_ACTIONS)):
                secrets.break_glass.add_to_policy(
                    iam.PolicyStatement(
                        actions=list(actions), resources=[f"{secrets.grantable[name].secret_arn}-??????"]
                    )
                )
            secrets.break_glass.add_to_policy(
                iam.PolicyStatement(actions=["lambda:InvokeFunction"], resources=[self.function.function_arn])
            )
        # Secrets Manager of this account, rotating this very secret (confused deputy: not another secret's
        # rotation configured with this function by someone allowed to call RotateSecret elsewhere)
        self.function.add_permission(
            "SecretsManagerInvokes",
            principal=iam.ServicePrincipal("secretsmanager.amazonaws.com"),
            source_account=Aws.ACCOUNT_ID,
            source_arn=secrets.secrets[signing].secret_arn,
        )
        schedule = secretsmanager.CfnRotationSchedule(
            self,
            "Schedule",
            secret_id=secrets.secrets[signing].secret_arn,
            rotation_lambda_arn=self.function.function_arn,
            rotation_rules=secretsmanager.CfnRotationSchedule.RotationRulesProperty(
                automatically_after_days=ROTATION_DAYS
            ),
        )
        # Secrets Manager checks at creation that it may invoke the function.
        schedule.node.add_dependency(self.function.permissions_node.find_child("SecretsManagerInvokes"))
