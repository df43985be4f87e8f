"""The real Discord REST adapter against the loopback stub (ops/stubs/discord.py): paths, auth, 429s."""

from __future__ import annotations

import pytest

from ops.stubs.discord import DiscordStub
from providers.discord import DiscordRest
from providers.errors import ProviderAmbiguous, ProviderAuthFailed, ProviderRejected, ProviderThrottled, ProviderUnavailable

TOKEN = "stub-bot-token"


@pytest.fixture
def stub():
    with DiscordStub(token=TOKEN) as running:
        yield running


def test_roles_messages_and_direct_notifications_go_to_discords_paths(stub):
    discord = DiscordRest(stub.base_url, TOKEN)
    discord.add_role("1", "2", "3")
    discord.add_role("1", "2", "3")  # idempotent, like Discord
    discord.add_role("1", "2", "4")
    discord.remove_role("1", "2", "4")
    message_id = discord.post_message("10", "hello")
    discord.edit_message("10", message_id, "hello again")
    discord.send_direct("20", "your reminder")
    assert stub.roles[("1", "2")] == {"3"}
    assert stub.messages["10"][message_id] == "hello again"
    assert stub.direct_messages("20") == ["your reminder"]
    assert stub.requests[:4] == [("PUT", "/guilds/1/members/2/roles/3")] * 2 + [
        ("PUT", "/guilds/1/members/2/roles/4"), ("DELETE", "/guilds/1/members/2/roles/4")]
    assert ("PATCH", f"/channels/10/messages/{message_id}") in stub.requests
    assert ("POST", "/users/@me/channels") in stub.requests


def test_429_raises_rate_limited_with_retry_after_and_changes_nothing(stub):
    discord = DiscordRest(stub.base_url, TOKEN)
    stub.rate_limit(1, retry_after=2.5)
    with pytest.raises(ProviderThrottled) as info:
        discord.add_role("1", "2", "3")
    assert info.value.retry_after_s == 2.5
    assert stub.roles == {}
    discord.add_role("1", "2", "3")
    assert stub.roles[("1", "2")] == {"3"}


def test_a_wrong_token_is_refused(stub):
    with pytest.raises(ProviderAuthFailed) as info:
        DiscordRest(stub.base_url, "not-the-token").add_role("1", "2", "3")
    assert info.value.status == 401


def test_after_a_401_the_token_is_re_read_once_and_the_call_retried(stub):
    # GIVEN an adapter whose cached token was rotated away at Discord (the stub now wants the new one)
    reads: list[bool] = []
    current = {"value": TOKEN}

    def token(fresh: bool) -> str:
        reads.append(fresh)
        return current["value"] if fresh else TOKEN

    discord = DiscordRest(stub.base_url, token)
    stub.token = current["value"] = "rotated-bot-token"
    # WHEN a call is refused with 401 THEN the token is re-read without the cache and the call succeeds
    discord.add_role("1", "2", "3")
    assert stub.roles[("1", "2")] == {"3"} and reads == [False, True]
    # AND a token that stays wrong fails after exactly one re-read
    stub.token = "revoked-everywhere"
    reads.clear()
    with pytest.raises(ProviderAuthFailed) as info:
        discord.add_role("1", "2", "4")
    assert info.value.status == 401 and reads == [False, True]


def test_editing_an_unknown_message_is_a_refusal_with_discords_code(stub):
    with pytest.raises(ProviderRejected) as info:
        DiscordRest(stub.base_url, TOKEN).edit_message("10", "999", "x")
    assert (info.value.status, info.value.code) == (404, 10008)


def test_an_unreachable_discord_is_transient_and_known_not_to_have_acted():
    stub = DiscordStub(token=TOKEN)
    url = stub.start()
    stub.stop()
    with pytest.raises(ProviderUnavailable) as info:
        DiscordRest(url, TOKEN, timeout_s=2).add_role("1", "2", "3")
    assert type(info.value) is ProviderUnavailable  # no connection: it cannot have acted (not ambiguous)


def test_the_local_runtime_entry_point_gives_a_stub_its_url_and_its_token():
    from ops.stubs import discord as stub_module

    stub, url, token = stub_module.start_local(None)
    try:
        assert stub_module.SECRETS == ("discord_token",) and url == stub.base_url
        message_id = stub.add_message("10", "seeded", message_id="140000000000000001")
        DiscordRest(url, token).edit_message("10", message_id, "edited")
        assert stub.messages["10"]["140000000000000001"] == "edited"
    finally:
        stub.stop()


def test_a_post_with_an_enforced_nonce_is_created_once_within_discords_window():
    # GIVEN the stub on a clock we advance, and a post whose reply is lost after Discord created it
    from jobfence.clock import FrozenClock
    from ops.stubs.discord import NONCE_WINDOW_MS

    clock = FrozenClock()
    with DiscordStub(token=TOKEN, clock=clock) as stub:
        discord = DiscordRest(stub.base_url, TOKEN, timeout_s=5)
        stub.lose_replies(1, route="/messages")
        with pytest.raises(ProviderAmbiguous):
            discord.send_direct("20", "your reminder", nonce="n" * 25)
        # WHEN the same post is re-sent with the same nonce THEN Discord returns the message it created
        first = stub.created[-1][1]
        assert discord.send_direct("20", "your reminder", nonce="n" * 25) == first
        assert stub.direct_messages("20") == ["your reminder"]
        # AND past the window a re-send is a new message (what stays at-least-once)
        clock.advance(ms=NONCE_WINDOW_MS + 1)
        assert discord.send_direct("20", "your reminder", nonce="n" * 25) != first
        assert len(stub.direct_messages("20")) == 2
        # AND without a nonce every post is a new message
        discord.post_message("10", "a")
        discord.post_message("10", "a")
        assert len(stub.messages["10"]) == 2
