"""Who may ask the Discord worker for what: one signing key per publishing job, and each job's grant.

Every signed event names its signer (the job whose key signed it). The worker
holds one keyring per signer (`SignerKeyrings`: that job's verify secret) and
a table of grants (`SignerGrant`: the event types the job may ask for and, for
a role change, the guilds it may touch). An event is refused

    forged        when it names a signer the table does not know, or a kid that signer's verify secret
                  does not hold (a job signing with its own key but claiming another job's name), or the
                  signature does not match
    not_allowed   when the signature is valid but the signer may not ask for that type, or that guild

so compromising one job's key gives only what that job may do anyway. The
table is derived from the catalog (`grants_from_catalog`: `SIGNER_EVENTS` and
each job's `discord_guilds` setting).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jobfence.clock import Clock
from jobs.club.signing import KeyringBusy, VerifyKey, VerifyKeyring
from providers.secrets import Secrets

__all__ = ["KeyringBusy", "SignerGrant", "SignerKeyrings", "grants_from_catalog"]


@dataclass(frozen=True)
class SignerGrant:
    """What one signer may ask for: event type values, and the guild ids a role change may name."""

    types: frozenset[str]
    guilds: frozenset[str] = frozenset()

    @classmethod
    def of(cls, types: Iterable[str], guilds: Iterable[str] = ()) -> SignerGrant:
        return cls(frozenset(types), frozenset(guilds))

    def allows_type(self, type_: str) -> bool:
        return type_ in self.types

    def allows_guild(self, guild_id: str) -> bool:
        return guild_id in self.guilds


def parse_guilds(setting: str) -> frozenset[str]:
    """The guild ids of a `discord_guilds` setting (comma-separated)."""
    return frozenset(g.strip() for g in setting.split(",") if g.strip())


def grants_from_catalog() -> dict[str, SignerGrant]:
    """The worker's table: each publishing job's event types (`SIGNER_EVENTS`) and guilds (its setting)."""
    from jobs.club.catalog import GUILDS_SETTING, SCHEDULER_JOBS, SIGNER_EVENTS

    specs = {job.name: job for job in SCHEDULER_JOBS}
    return {
        job: SignerGrant.of(types, parse_guilds(specs[job].config.get(GUILDS_SETTING, "")))
        for job, types in SIGNER_EVENTS.items()
    }


class SignerKeyrings:
    """One `VerifyKeyring` per signer (each with its own refresh allowance): the key `kid` of `signer`."""

    def __init__(self, keyrings: Mapping[str, VerifyKeyring]) -> None:
        self._keyrings = dict(keyrings)

    @classmethod
    def of(cls, secrets: Secrets, names: Mapping[str, str], clock: Clock) -> SignerKeyrings:
        """Keyrings over `names` (signer -> its verify secret's name), all read through `secrets`."""
        return cls({signer: VerifyKeyring(secrets, name, clock) for signer, name in names.items()})

    def find(self, signer: str, kid: str) -> VerifyKey | None:
        """The public key `kid` of `signer`; None for a signer without a keyring or a kid it does not hold;
        `KeyringBusy` (retryable) when the kid is not cached and the secret may not be re-read yet."""
        keyring = self._keyrings.get(signer)
        return None if keyring is None else keyring.find(kid)
