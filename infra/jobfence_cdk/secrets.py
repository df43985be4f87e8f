"""One Secrets Manager secret per logical secret the catalog names, under its stage's fixed name.

Functions receive the fixed name (`jobfence.config.secret_name(logical, prefix)`,
"<prefix>/<logical>") as a literal and may read a secret only when their
catalog entry lists it (`grant_read` in `CatalogResources.grant`). Each
secret's resource policy also denies `GetSecretValue` to every principal but
the roles granted it (`admit_only`), so a role given a broad policy elsewhere
in the account still cannot read it, and denies replacing a version
(`VERSION_ACTIONS`) to every principal but the rotation role (for the pair it
rotates) and the break-glass role, and managing the secret (`MANAGE_ACTIONS`:
rotating it, changing or deleting it or its policy) to every principal but the
break-glass role and the stack's CloudFormation execution role (which creates
the rotation schedule and the policy itself; whoever deploys can rewrite the
policy anyway). The break-glass role (`break_glass`) is assumable by principals
of this account whose own policy allows `sts:AssumeRole` on it; it may store a
third-party secret's value, start and revoke a signing key's rotation
(`jobfence_cdk.rotation`), and read no secret. The value of a third-party secret
is set through it after the first deploy (docs/security.md); CloudFormation only
creates a random placeholder.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from aws_cdk import CfnOutput, DefaultStackSynthesizer, Duration, Fn, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from jobfence.config import DEFAULT_PREFIX, secret_name
from jobfence_cdk.nag import acknowledge
from jobfence_cdk.tables import pascal

# A signing key of `rotated` pairs has a rotation schedule (infra/jobfence_cdk/rotation.py): SMG4 is met there. The
# others keep an acknowledgement with the reason (docs/security.md).
VERIFY_KEY = "a public key: rewritten by its signing key's scheduled rotation, never rotated alone"
THIRD_PARTY = "a third-party credential: rotated by the operator at the provider, then stored (docs/security.md)"
# Replacing the value a function reads: only the rotation (its own pair) and the break-glass role.
VERSION_ACTIONS = ("secretsmanager:PutSecretValue", "secretsmanager:UpdateSecretVersionStage")
# Rotating, changing (UpdateSecret with a value stores a version), deleting or re-policing the secret: only the
# break-glass role and the deployer.
MANAGE_ACTIONS = (
    "secretsmanager:RotateSecret",
    "secretsmanager:CancelRotateSecret",
    "secretsmanager:UpdateSecret",
    "secretsmanager:DeleteSecret",
    "secretsmanager:RestoreSecret",
    "secretsmanager:PutResourcePolicy",
    "secretsmanager:DeleteResourcePolicy",
)
BREAK_GLASS_OUTPUT = "BreakGlassRoleArn"


class CatalogSecrets(Construct):
    """Attributes: `secrets` (logical name -> the Secret resource), `grantable`
    (logical name -> the same secret referenced by its fixed name, for grants) and
    `break_glass` (the role an operator assumes to store a value or rotate now; None without secrets).

    Grants name the secret by its fixed name (ARN `...:secret:<name>-??????`)
    rather than referencing the resource: a policy that references a resource the
    local runtime's emulator does not model (Secrets Manager) fails there, and the
    name is fixed anyway.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: Iterable[str],
        prefix: str = DEFAULT_PREFIX,
        rotated: Sequence[tuple[str, str]] = (),
    ) -> None:
        """`rotated`: the (signing, verify) pairs a `SigningKeyRotation` rotates (their SMG4 is met, or stated)."""
        super().__init__(scope, construct_id)
        scheduled = {signing for signing, _ in rotated}
        public = {verify for _, verify in rotated}
        self.secrets: dict[str, secretsmanager.Secret] = {}
        self.grantable: dict[str, secretsmanager.ISecret] = {}
        for name in sorted(set(names)):
            secret = secretsmanager.Secret(
                self,
                pascal(name),
                secret_name=secret_name(name, prefix),
                description=(
                    f"{prefix} secret {name!r}: value set by an operator, read only by the entries that list it"
                ),
            )
            if name not in scheduled:
                acknowledge(secret, "AwsSolutions-SMG4", VERIFY_KEY if name in public else THIRD_PARTY)
            self.secrets[name] = secret
            self.grantable[name] = secretsmanager.Secret.from_secret_name_v2(
                self, f"{pascal(name)}ByName", secret_name(name, prefix)
            )
        self.break_glass: iam.Role | None = None
        if self.secrets:
            self.break_glass = iam.Role(
                self,
                "BreakGlass",
                assumed_by=iam.AccountRootPrincipal(),
                max_session_duration=Duration.hours(1),
                description=(
                    f"{prefix} break-glass: stores third-party secret values, starts and revokes the signing keys'"
                    " rotations; reads no secret (docs/security.md)"
                ),
            )
            CfnOutput(self, "BreakGlassArn", key=BREAK_GLASS_OUTPUT, value=self.break_glass.role_arn)

    def _arn(self, name: str) -> str:
        # by its fixed name, as the catalog grants: the real ARN ends in "-" and six random characters
        return f"{self.grantable[name].secret_arn}-??????"

    def admit_only(
        self,
        readers: Mapping[str, Sequence[iam.IRole]],
        rotation: iam.IRole | None = None,
        rotated: Collection[str] = (),
    ) -> None:
        """Deny reading each secret to every principal but the roles granted it; deny replacing its value to all
        but `rotation` (for the `rotated` secrets) and the break-glass role, and managing it to all but the
        break-glass role and the deployer. The break-glass role may store the secrets not `rotated`."""
        deployer = _deployer_role_arn(Stack.of(self))
        for name, secret in self.secrets.items():
            roles = list(readers.get(name, ()))
            secret.add_to_resource_policy(
                iam.PolicyStatement(
                    sid="OnlyTheNamedRolesRead",
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=["secretsmanager:GetSecretValue"],
                    resources=["*"],  # in a resource policy "*" means this secret
                    conditions={"StringNotEquals": {"aws:PrincipalArn": [r.role_arn for r in roles] or ["none"]}},
                )
            )
            assert self.break_glass is not None  # created with the first secret
            writers = [self.break_glass.role_arn]
            if rotation is not None and name in rotated:
                writers.append(rotation.role_arn)
            else:
                self.break_glass.add_to_policy(
                    iam.PolicyStatement(
                        actions=["secretsmanager:DescribeSecret", "secretsmanager:PutSecretValue"],
                        resources=[self._arn(name)],
                    )
                )
            for sid, actions, admitted in (
                ("OnlyTheRotationWrites", VERSION_ACTIONS, writers),
                ("OnlyBreakGlassOrDeployerManages", MANAGE_ACTIONS, [self.break_glass.role_arn, *deployer]),
            ):
                secret.add_to_resource_policy(
                    iam.PolicyStatement(
                        sid=sid,
                        effect=iam.Effect.DENY,
                        principals=[iam.AnyPrincipal()],
                        actions=list(actions),
                        resources=["*"],
                        conditions={"StringNotEquals": {"aws:PrincipalArn": admitted}},
                    )
                )


def _deployer_role_arn(stack: Stack) -> list[str]:
    """The CloudFormation execution role of the default synthesizer (the bootstrap's), or none (a synthesizer
    that deploys with the caller's credentials: that caller then needs the break-glass role to rotate)."""
    synthesizer = stack.synthesizer
    if isinstance(synthesizer, DefaultStackSynthesizer) and synthesizer.cloud_formation_execution_role_arn:
        # "arn:${AWS::Partition}:iam::${AWS::AccountId}:role/cdk-<qualifier>-cfn-exec-role-...": resolved in the template
        return [Fn.sub(synthesizer.cloud_formation_execution_role_arn)]
    return []
