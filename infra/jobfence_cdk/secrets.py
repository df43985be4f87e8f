"""One Secrets Manager secret per logical secret the catalog names, under its stage's fixed name.

Functions receive the fixed name (`jobfence.config.secret_name(logical, prefix)`,
"<prefix>/<logical>") as a literal and may read a secret only when their
catalog entry lists it (`grant_read` in `CatalogResources.grant`). Each
secret's resource policy also denies `GetSecretValue` to every principal but
the roles granted it (`admit_only`), so a role given a broad policy elsewhere
in the account still cannot read it. The value is set by an operator after
the first deploy (docs/operations.md, docs/security.md); CloudFormation only
creates a random placeholder.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from jobfence.config import DEFAULT_PREFIX, secret_name
from jobfence_cdk.nag import acknowledge
from jobfence_cdk.tables import pascal

# The signing key has a rotation schedule (infra/jobfence_cdk/rotation.py): SMG4 is met there. The others keep an
# acknowledgement with the reason (docs/security.md).
SCHEDULED = frozenset({"club_event_signing_key"})
NOT_ROTATED_HERE = {
    "club_event_verify_key": "a public key: rewritten by the signing key's scheduled rotation, never rotated alone",
}
THIRD_PARTY = "a third-party credential: rotated by the operator at the provider, then stored (docs/security.md)"


class CatalogSecrets(Construct):
    """Attributes: `secrets` (logical name -> the Secret resource) and `grantable`
    (logical name -> the same secret referenced by its fixed name, for grants).

    Grants name the secret by its fixed name (ARN `...:secret:<name>-??????`)
    rather than referencing the resource: a policy that references a resource the
    local runtime's emulator does not model (Secrets Manager) fails there, and the
    name is fixed anyway.
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, names: Iterable[str], prefix: str = DEFAULT_PREFIX
    ) -> None:
        super().__init__(scope, construct_id)
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
            if name not in SCHEDULED:
                acknowledge(secret, "AwsSolutions-SMG4", NOT_ROTATED_HERE.get(name, THIRD_PARTY))
            self.secrets[name] = secret
            self.grantable[name] = secretsmanager.Secret.from_secret_name_v2(
                self, f"{pascal(name)}ByName", secret_name(name, prefix)
            )

    def admit_only(self, readers: Mapping[str, Sequence[iam.IRole]]) -> None:
        """Deny reading each secret to every principal but the roles granted it."""
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
