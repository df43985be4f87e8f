"""The signed event contract: canonical form, signature, freshness, typed payloads."""

from __future__ import annotations

import json

import pytest

from jobfence.clock import FrozenClock
from jobfence.errors import InvalidEvent
from jobs.club.events import (
    MAX_AGE_MS,
    Event,
    EventRejected,
    EventType,
    RejectReason,
    Signer,
    Verifier,
    canonical,
    nonce_for,
)

KEY = b"s" * 32


def _signed(clock, **overrides):
    event = Event.build(EventType.ROLE_ADD, nonce_for("t", 1), guild_id="1", user_id="2", role_id="3")
    body = json.loads(Signer(KEY, clock).sign(event))
    body.update(overrides)
    return json.dumps(body)


def test_a_signed_event_verifies_into_its_typed_payload():
    clock = FrozenClock()
    event = Verifier(KEY, clock).verify(_signed(clock))
    assert event.type is EventType.ROLE_ADD and event.payload.role_id == "3" and event.issued_at == clock.now_ms()


def test_the_signature_covers_type_nonce_issue_time_and_payload():
    clock = FrozenClock()
    verifier = Verifier(KEY, clock)
    for tamper in ({"type": "role_remove"}, {"nonce": nonce_for("other")}, {"issued_at": clock.now_ms() - 1},
                   {"payload": {"guild_id": "1", "user_id": "2", "role_id": "4"}}):
        with pytest.raises(EventRejected) as info:
            verifier.verify(_signed(clock, **tamper))
        assert info.value.reason is RejectReason.FORGED, tamper


def test_an_event_signed_with_another_key_is_forged():
    clock = FrozenClock()
    event = Event.build(EventType.DIRECT_NOTIFICATION, nonce_for("x"), user_id="5", content="hi")
    body = Signer(b"x" * 32, clock).sign(event)
    with pytest.raises(EventRejected) as info:
        Verifier(KEY, clock).verify(body)
    assert info.value.reason is RejectReason.FORGED


def test_stale_and_future_events_are_rejected():
    clock = FrozenClock()
    body = _signed(clock)
    clock.advance(ms=MAX_AGE_MS + 1)
    with pytest.raises(EventRejected) as info:
        Verifier(KEY, clock).verify(body)
    assert info.value.reason is RejectReason.STALE
    future = FrozenClock(clock.now_ms() + 10 * 60_000)
    with pytest.raises(EventRejected) as info:
        Verifier(KEY, clock).verify(_signed(future))
    assert info.value.reason is RejectReason.STALE


@pytest.mark.parametrize("body", ["not json", "[]", "{}", json.dumps({"type": "role_add"}),
                                  json.dumps({"type": "role_add", "nonce": 1, "issued_at": "x", "payload": [], "signature": 2})])
def test_malformed_bodies_are_rejected_as_malformed(body):
    with pytest.raises(EventRejected) as info:
        Verifier(KEY, FrozenClock()).verify(body)
    assert info.value.reason is RejectReason.MALFORMED


def test_a_correctly_signed_event_with_a_bad_payload_is_malformed():
    # A signer with the key can still not make the worker call an arbitrary URL: ids must be snowflakes.
    clock = FrozenClock()
    payload = {"guild_id": "1/../../x", "user_id": "2", "role_id": "3"}
    issued = clock.now_ms()
    nonce = nonce_for("y")
    import hashlib
    import hmac
    sig = hmac.new(KEY, canonical("role_add", nonce, issued, payload), hashlib.sha256).hexdigest()
    body = json.dumps({"type": "role_add", "nonce": nonce, "issued_at": issued, "payload": payload, "signature": sig})
    with pytest.raises(EventRejected) as info:
        Verifier(KEY, clock).verify(body)
    assert info.value.reason is RejectReason.MALFORMED


def test_building_an_event_checks_its_payload_type():
    with pytest.raises(InvalidEvent, match="message_edit"):
        Event.build(EventType.MESSAGE_EDIT, nonce_for("z"), channel_id="1", content="no message id")
    with pytest.raises(ValueError):
        Signer(b"short", FrozenClock())


def test_nonces_are_deterministic_per_change():
    assert nonce_for("job", "m-1", 3) == nonce_for("job", "m-1", 3) != nonce_for("job", "m-1", 4)
