"""Secrets fetched on use: Powertools' cache with a max age, version stages, and rotation of the signing key.

Time is a FrozenClock driving Powertools' cache expiry (tests.support.drive_powertools_cache); nothing sleeps.
"""

from __future__ import annotations

import json

import pytest

from jobs.club.events import Event, EventRejected, EventType, RejectReason, Signer, Verifier, nonce_for
from jobs.club.signing import GRACE_MS, REFRESH_MIN_MS, SigningKeys, VerifyKeyring, verify_secret_value
from providers.secrets import CURRENT, PREVIOUS, SecretMissing, SecretsManagerValues
from jobs.club.signers import SignerKeyrings
from tests.support import TEST_SIGNER, drive_powertools_cache, grants_for_tests, signing_pair

MAX_AGE_S = 300


@pytest.fixture
def sm(aws, clock, monkeypatch):
    drive_powertools_cache(monkeypatch, clock)
    return aws.client("secretsmanager")


def _verifier(keyring: VerifyKeyring, clock) -> Verifier:
    """The worker's verifier with `keyring` as the test signer's."""
    return Verifier(SignerKeyrings({TEST_SIGNER: keyring}), clock, grants_for_tests())


def _event(n: int) -> Event:
    return Event.build(EventType.ROLE_ADD, nonce_for("rotation", n), guild_id="1", user_id="2", role_id="3")


def test_a_warm_reader_sees_a_stored_value_within_max_age_and_not_before(sm, clock):
    # GIVEN a warm function that has read the token once
    sm.create_secret(Name="jobfence/discord_token", SecretString="token-1")
    values = SecretsManagerValues(sm, max_age_s=MAX_AGE_S)
    assert values.get("jobfence/discord_token") == "token-1"
    # WHEN an operator stores a new value
    sm.put_secret_value(SecretId="jobfence/discord_token", SecretString="token-2")
    # THEN the cached value serves until max_age, the new one right after
    clock.advance(seconds=MAX_AGE_S - 1)
    assert values.get("jobfence/discord_token") == "token-1"
    clock.advance(seconds=2)
    assert values.get("jobfence/discord_token") == "token-2"


def test_fresh_skips_the_cache_and_stages_are_cached_apart(sm, clock):
    sm.create_secret(Name="s", SecretString="v1")
    values = SecretsManagerValues(sm, max_age_s=MAX_AGE_S)
    with pytest.raises(SecretMissing):
        values.get("s", PREVIOUS)  # no AWSPREVIOUS before the first rotation
    assert values.get("s") == "v1"
    sm.put_secret_value(SecretId="s", SecretString="v2")
    assert values.get("s") == "v1"
    assert values.get("s", fresh=True) == "v2"
    assert values.get("s", PREVIOUS) == "v1" and values.get("s", CURRENT) == "v2"


def test_a_missing_secret_is_a_clear_error_without_the_value(sm):
    with pytest.raises(SecretMissing, match="no AWSCURRENT"):
        SecretsManagerValues(sm).get("jobfence/nothing")


def test_rotating_the_signing_key_never_rejects_a_good_event_on_warm_functions(sm, clock):
    """Rotation while both sides are warm: events signed before, during and after all verify."""
    old, new = signing_pair(), signing_pair()
    sm.create_secret(Name="sign", SecretString=old.signing_value)
    sm.create_secret(Name="verify", SecretString=old.verify_value)
    job_values, worker_values = SecretsManagerValues(sm, MAX_AGE_S), SecretsManagerValues(sm, MAX_AGE_S)
    signer = Signer(SigningKeys(job_values, "sign", TEST_SIGNER), clock)
    verifier = _verifier(VerifyKeyring(worker_values, "verify", clock), clock)
    # GIVEN warm caches on both sides
    assert verifier.verify(signer.sign(_event(0))).nonce == _event(0).nonce
    # WHEN the key is rotated (public half first, dated as the rotation dates it, then private: jobs.club.rotation)
    sm.put_secret_value(SecretId="verify", SecretString=verify_secret_value(new.verify_value, clock.now_ms()))
    sm.put_secret_value(SecretId="sign", SecretString=new.signing_value)
    # THEN a job still holding the old key (its cache) signs events the worker accepts (AWSPREVIOUS) ...
    clock.advance(seconds=MAX_AGE_S // 2)
    during = signer.sign(_event(1))
    assert json.loads(during)["kid"] == old.kid
    # ... even after the worker's own cache expired and it re-read CURRENT=new, PREVIOUS=old
    clock.advance(seconds=MAX_AGE_S)
    assert verifier.verify(during).nonce == _event(1).nonce
    # AND once the job's cache expired it signs with the new key, which the worker finds
    after = signer.sign(_event(2))
    assert json.loads(after)["kid"] == new.kid
    assert verifier.verify(after).nonce == _event(2).nonce


def test_an_event_with_a_new_key_id_makes_a_warm_worker_re_read_at_once(sm, clock):
    old, new = signing_pair(), signing_pair()
    sm.create_secret(Name="sign", SecretString=old.signing_value)
    sm.create_secret(Name="verify", SecretString=old.verify_value)
    verifier = _verifier(VerifyKeyring(SecretsManagerValues(sm, MAX_AGE_S), "verify", clock), clock)
    verifier.verify(Signer(SigningKeys(SecretsManagerValues(sm, MAX_AGE_S), "sign", TEST_SIGNER), clock).sign(_event(0)))
    sm.put_secret_value(SecretId="verify", SecretString=new.verify_value)
    sm.put_secret_value(SecretId="sign", SecretString=new.signing_value)
    # GIVEN a fresh job signing with the new key while the worker's keyring is still cached (old only)
    body = Signer(SigningKeys(SecretsManagerValues(sm, MAX_AGE_S), "sign", TEST_SIGNER), clock).sign(_event(1))
    # THEN the unknown kid makes the worker re-read the verify secret once: accepted, no wait for max_age
    assert verifier.verify(body).nonce == _event(1).nonce


def test_unknown_key_ids_re_read_at_most_once_per_interval_and_are_forged(aws, clock):
    from providers.secrets import MemorySecrets

    pair = signing_pair()
    secrets = MemorySecrets({"verify": pair.verify_value})
    verifier = _verifier(VerifyKeyring(secrets, "verify", clock), clock)
    body = Signer(SigningKeys(MemorySecrets({"s": signing_pair().signing_value}), "s", TEST_SIGNER), clock).sign(_event(0))
    reads = []
    for _ in range(5):
        with pytest.raises(EventRejected) as info:
            verifier.verify(body)
        assert info.value.reason is RejectReason.FORGED and "unknown key id" in str(info.value)
        reads.append(secrets.reads)
    # each attempt reads CURRENT (a value with no rotation time: AWSPREVIOUS is never accepted, so never read),
    # and only the first re-reads fresh (1 more)
    assert reads == [2, 3, 4, 5, 6]
    clock.advance(ms=REFRESH_MIN_MS)
    with pytest.raises(EventRejected):
        verifier.verify(body)
    assert secrets.reads == 8


def test_two_rotations_inside_max_age_push_the_oldest_key_out(aws, clock):
    """Why the runbook says: rotate again only after max_age (documented limit, shown here)."""
    from providers.secrets import MemorySecrets

    a, b, c = signing_pair(), signing_pair(), signing_pair()
    secrets = MemorySecrets({"sign": a.signing_value, "verify": a.verify_value})
    body = Signer(SigningKeys(secrets, "sign", TEST_SIGNER), clock).sign(_event(0))
    for pair in (b, c):
        secrets.put("verify", verify_secret_value(pair.verify_value, clock.now_ms()))
        secrets.put("sign", pair.signing_value)
    with pytest.raises(EventRejected) as info:
        _verifier(VerifyKeyring(secrets, "verify", clock), clock).verify(body)
    assert info.value.reason is RejectReason.FORGED


def test_a_throttled_secret_read_is_a_store_error_with_its_kind_and_no_value(sm):
    from jobfence.errors import ErrorKind
    from jobfence.errors import StoreError
    from tests.aws_faults import throttled

    sm.create_secret(Name="jobfence/paypal", SecretString="client-secret")

    def refuse(**_):
        raise throttled("GetSecretValue")

    sm.meta.events.register("before-call.secrets-manager.GetSecretValue", refuse)
    with pytest.raises(StoreError) as raised:
        SecretsManagerValues(sm).get("jobfence/paypal", fresh=True)
    assert not isinstance(raised.value, SecretMissing)
    assert raised.value.kind is ErrorKind.THROTTLED
    assert "ProvisionedThroughputExceededException" in str(raised.value) and "client-secret" not in str(raised.value)


class _Held:
    """A warm job's cached signing key: the one it was given, whatever the secret holds now."""

    signer = TEST_SIGNER

    def __init__(self, value: str) -> None:
        from jobs.club.signing import SigningKey

        self.key = SigningKey.from_secret(value)

    def current(self):
        return self.key


def _rotated(sm, clock):
    """A pair rotated by the real steps (jobs.club.rotation) at clock's now; (a signer holding the old key, rotation)."""
    import uuid

    from jobs.club.rotation import SigningRotation

    old = signing_pair()
    sm.create_secret(Name="sign", SecretString=old.signing_value)
    sm.create_secret(Name="verify", SecretString=old.verify_value)
    rotation = SigningRotation(sm, "sign", "verify", clock)
    rotation.rotate(str(uuid.uuid4()))
    return Signer(_Held(old.signing_value), clock), rotation


def _cold_worker(sm, clock) -> Verifier:
    return _verifier(VerifyKeyring(SecretsManagerValues(sm, MAX_AGE_S), "verify", clock), clock)


def test_a_rotated_out_key_verifies_only_within_the_grace_window(sm, clock):
    """The issue's finding: a cold worker hours after a rotation accepted an event signed by the old key."""
    held, _ = _rotated(sm, clock)
    # GIVEN a warm job still signing with the old key (its cache) just before that cache expires
    clock.advance(seconds=MAX_AGE_S - 1)
    late = held.sign(_event(1))
    # THEN a worker accepts it through AWSPREVIOUS until GRACE_MS after the rotation
    clock.advance(ms=GRACE_MS - (MAX_AGE_S - 1) * 1000 - 1)
    assert _cold_worker(sm, clock).verify(late).nonce == _event(1).nonce
    # AND from GRACE_MS on, the old key verifies nothing: forged, on a cold worker ...
    clock.advance(ms=1)
    with pytest.raises(EventRejected) as info:
        _cold_worker(sm, clock).verify(held.sign(_event(2)))
    assert info.value.reason is RejectReason.FORGED
    # ... and hours later
    clock.advance(seconds=3 * 3600)
    with pytest.raises(EventRejected):
        _cold_worker(sm, clock).verify(held.sign(_event(3)))


def test_revoke_stops_the_old_key_at_once_on_a_cold_worker_and_within_max_age_on_a_warm_one(sm, clock):
    held, rotation = _rotated(sm, clock)
    warm = _cold_worker(sm, clock)
    assert warm.verify(held.sign(_event(1))).nonce == _event(1).nonce  # inside the grace window: accepted
    # WHEN the operator revokes (a suspected leak), right after the rotation
    rotation.revoke()
    # THEN a cold worker rejects the old key at once
    with pytest.raises(EventRejected):
        _cold_worker(sm, clock).verify(held.sign(_event(2)))
    # AND a warm worker once its cache (max_age) has expired, still well inside the grace window
    clock.advance(seconds=MAX_AGE_S + 1)
    assert (MAX_AGE_S + 1) * 1000 < GRACE_MS
    with pytest.raises(EventRejected):
        warm.verify(held.sign(_event(3)))
