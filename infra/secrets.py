"""One Secrets Manager secret per logical secret the catalog names, under its fixed name.

Functions receive the fixed name (`jobfence.config.secret_name`) as a literal
and may read a secret only when their catalog entry lists it (`grant_read` in
`CatalogResources.grant`). The value is set by an operator after the first
deploy (docs/operations.md); CloudFormation only creates a random placeholder.
"""

from __future__ import annotations

from typing import Iterable

from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from jobfence.config import secret_name
from infra.nag import acknowledge
from infra.tables import pascal


class CatalogSecrets(Construct):
    """Attributes: `secrets` (logical name -> the Secret resource) and `grantable`
    (logical name -> the same secret referenced by its fixed name, for grants).

    Grants name the secret by its fixed name (ARN `...:secret:<name>-??????`)
    rather than referencing the resource: a policy that references a resource the
    local runtime's emulator does not model (Secrets Manager) fails there, and the
    name is fixed anyway.
    """

    def __init__(self, scope: Construct, construct_id: str, *, names: Iterable[str]) -> None:
        super().__init__(scope, construct_id)
        self.secrets: dict[str, secretsmanager.Secret] = {}
        self.grantable: dict[str, secretsmanager.ISecret] = {}
        for name in sorted(set(names)):
            secret = secretsmanager.Secret(
                self,
                pascal(name),
                secret_name=secret_name(name),
                description=f"jobfence secret {name!r}: value set by an operator, read only by the entries that list it",
            )
            acknowledge(
                secret,
                "AwsSolutions-SMG4",
                "a third-party credential: rotated by the operator at the provider, not by a Lambda",
            )
            self.secrets[name] = secret
            self.grantable[name] = secretsmanager.Secret.from_secret_name_v2(
                self, f"{pascal(name)}ByName", secret_name(name)
            )
