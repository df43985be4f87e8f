"""The signed event contract: canonical form, signature, freshness, typed payloads."""

from __future__ import annotations

import json

import pytest

from jobfence.clock import FrozenClock
from jobfence.errors import InvalidEvent
from jobs.club.events import (
    MAX_AGE_MS,
    MAX_BODY_CHARS,
    Event,
    EventRejected,
    EventType,
    RejectReason,
    Signer,
    Verifier,
    canonical,
    nonce_for,
)

from jobs.club.signing import SigningKeys
from tests.support import TEST_SIGNER, grants_for_tests, signing_keys

SEED = b"s" * 32


def _keys(clock):
    return signing_keys(clock, SEED)


def _signed(clock, **overrides):
    event = Event.build(EventType.ROLE_ADD, nonce_for("t", 1), guild_id="1", user_id="2", role_id="3")
    body = json.loads(Signer(_keys(clock)[0], clock).sign(event))
    body.update(overrides)
    return json.dumps(body)


def _verifier(clock):
    return Verifier(_keys(clock)[1], clock, grants_for_tests())


def test_a_signed_event_verifies_into_its_typed_payload():
    clock = FrozenClock()
    event = _verifier(clock).verify(_signed(clock))
    assert event.type is EventType.ROLE_ADD and event.payload.role_id == "3" and event.issued_at == clock.now_ms()


def test_the_signature_covers_type_nonce_issue_time_payload_signer_and_key_id():
    clock = FrozenClock()
    verifier = _verifier(clock)
    for tamper in ({"type": "role_remove"}, {"nonce": nonce_for("other")}, {"issued_at": clock.now_ms() - 1},
                   {"payload": {"guild_id": "1", "user_id": "2", "role_id": "4"}}, {"kid": "0" * 16},
                   {"signer": "reconcile_membership_roles"}):
        with pytest.raises(EventRejected) as info:
            verifier.verify(_signed(clock, **tamper))
        assert info.value.reason is RejectReason.FORGED, tamper


def test_an_event_signed_with_another_key_is_forged():
    clock = FrozenClock()
    event = Event.build(EventType.DIRECT_NOTIFICATION, nonce_for("x"), user_id="5", content="hi")
    body = Signer(signing_keys(clock, b"x" * 32)[0], clock).sign(event)
    with pytest.raises(EventRejected) as info:
        _verifier(clock).verify(body)
    assert info.value.reason is RejectReason.FORGED


def test_stale_and_future_events_are_rejected():
    clock = FrozenClock()
    body = _signed(clock)
    clock.advance(ms=MAX_AGE_MS + 1)
    with pytest.raises(EventRejected) as info:
        _verifier(clock).verify(body)
    assert info.value.reason is RejectReason.STALE
    future = FrozenClock(clock.now_ms() + 10 * 60_000)
    with pytest.raises(EventRejected) as info:
        _verifier(clock).verify(_signed(future))
    assert info.value.reason is RejectReason.STALE


@pytest.mark.parametrize("body", ["not json", "[]", "{}", json.dumps({"type": "role_add"}),
                                  json.dumps({"type": "role_add", "nonce": 1, "issued_at": "x", "payload": [], "signer": 4, "kid": 3,
                                              "signature": 2})])
def test_malformed_bodies_are_rejected_as_malformed(body):
    with pytest.raises(EventRejected) as info:
        _verifier(FrozenClock()).verify(body)
    assert info.value.reason is RejectReason.MALFORMED


def test_a_correctly_signed_event_with_a_bad_payload_is_malformed():
    # A signer with the key can still not make the worker call an arbitrary URL: ids must be snowflakes.
    clock = FrozenClock()
    payload = {"guild_id": "1/../../x", "user_id": "2", "role_id": "3"}
    issued = clock.now_ms()
    nonce = nonce_for("y")
    key = _keys(clock)[0].current()
    sig = key.sign(canonical("role_add", nonce, issued, payload, TEST_SIGNER, key.kid))
    body = json.dumps({"type": "role_add", "nonce": nonce, "issued_at": issued, "payload": payload,
                       "signer": TEST_SIGNER, "kid": key.kid, "signature": sig})
    with pytest.raises(EventRejected) as info:
        _verifier(clock).verify(body)
    assert info.value.reason is RejectReason.MALFORMED


def test_building_an_event_checks_its_payload_type():
    with pytest.raises(InvalidEvent, match="message_edit"):
        Event.build(EventType.MESSAGE_EDIT, nonce_for("z"), channel_id="1", content="no message id")
    short = signing_keys(FrozenClock(), SEED)[2]
    short.put("signing", "c2hvcnQ=")  # base64 of "short": not a 32-byte key
    with pytest.raises(Exception, match="32-byte"):
        Signer(SigningKeys(short, "signing", TEST_SIGNER), FrozenClock()).sign(Event.build(EventType.DIRECT_NOTIFICATION, nonce_for("q"),
                                                                               user_id="5", content="hi"))


def test_nonces_are_deterministic_per_change():
    assert nonce_for("job", "m-1", 3) == nonce_for("job", "m-1", 3) != nonce_for("job", "m-1", 4)


# -- input edges: size, depth, echoed caller text ------------------------------------------------


def test_a_body_over_the_size_cap_is_malformed_before_it_is_parsed():
    body = '{"type": "' + "a" * MAX_BODY_CHARS + '"}'
    with pytest.raises(EventRejected) as info:
        _verifier(FrozenClock()).verify(body)
    assert info.value.reason is RejectReason.MALFORMED and "larger than" in str(info.value)


@pytest.mark.parametrize("depth", [10_000, 100_000])
def test_deep_nesting_is_malformed_never_a_recursion_error(depth):
    # GIVEN a body nested deeper than the parser's recursion limit (within the size cap for 10k)
    body = "[" * depth + "]" * depth
    # WHEN verified THEN a MALFORMED rejection, not a RecursionError escaping the worker
    with pytest.raises(EventRejected) as info:
        _verifier(FrozenClock()).verify(body)
    assert info.value.reason is RejectReason.MALFORMED


def test_a_deep_payload_inside_a_valid_shape_is_malformed():
    clock = FrozenClock()
    deep = "[" * 5_000 + "]" * 5_000
    body = _signed(clock).replace('"payload": {', '"payload": {"x": ' + deep + ", ", 1)
    with pytest.raises(EventRejected) as info:
        _verifier(clock).verify(body)
    assert info.value.reason in (RejectReason.MALFORMED, RejectReason.FORGED)


def test_caller_strings_echoed_in_a_rejection_are_bounded():
    clock = FrozenClock()
    huge = "k" * 40_000
    cases = [json.dumps({huge: 1}), _signed(clock, kid=huge), _signed(clock, type=huge), _signed(clock, signer=huge)]
    for body in cases:
        with pytest.raises(EventRejected) as info:
            _verifier(clock).verify(body)
        assert len(str(info.value)) < 600, str(info.value)[:100]


def test_an_extra_payload_key_is_named_bounded():
    clock = FrozenClock()
    keys = _keys(clock)[0].current()
    payload = {"guild_id": "1", "user_id": "2", "role_id": "3", "z" * 10_000: 1}
    nonce, issued = nonce_for("w"), clock.now_ms()
    body = json.dumps({"type": "role_add", "nonce": nonce, "issued_at": issued, "payload": payload,
                       "signer": TEST_SIGNER, "kid": keys.kid,
                       "signature": keys.sign(canonical("role_add", nonce, issued, payload, TEST_SIGNER, keys.kid))})
    with pytest.raises(EventRejected) as info:
        _verifier(clock).verify(body)
    assert info.value.reason is RejectReason.MALFORMED and len(str(info.value)) < 600
