"""Pure checks of the durable-batch contract: timings, wake-up parsing, catalog entries, provider fakes."""

from __future__ import annotations

import pytest

from jobfence.errors import InvalidEvent
from jobfence.work import BatchRef, ItemKey, Timing, parse_wakeup, reclaim_key, ItemStatus, RECLAIM_SHARDS
from jobs.catalog import CATALOG
from jobs.listings.pipelines import PIPELINES
from providers.errors import ProviderError, ProviderRejected, ProviderTimeout
from providers.items import GENERATOR, PUBLISHER, ItemRequest
from providers.items_fake import Behaviour, FakeItemProvider


def test_a_live_item_can_never_look_stale():
    # GIVEN each pipeline's timing WHEN compared THEN per-item < item stale <= batch stale, and retries land in time
    for pipeline in PIPELINES.values():
        t = pipeline.timing
        assert t.per_item_timeout_s < t.item_stale_s <= t.batch_stale_s
        assert all(t.retry_delay(a) < t.pending_stale_s for a in range(1, t.attempts_cap + 1))
    assert PIPELINES["generation"].timing.per_item_timeout_s == 240
    assert PIPELINES["generation"].timing.item_stale_s == 360
    assert PIPELINES["publish"].timing.per_item_timeout_s < 300 == PIPELINES["publish"].timing.item_stale_s
    with pytest.raises(ValueError, match="stale"):
        Timing(per_item_timeout_s=400, item_stale_s=360)


def test_each_queue_fits_its_per_item_timeout_and_visibility():
    for pipeline in PIPELINES.values():
        spec = CATALOG.queues[pipeline.queue]
        assert spec.worker_timeout_s > pipeline.timing.per_item_timeout_s
        assert spec.worker_timeout_s < pipeline.timing.item_stale_s  # a whole invocation ends before its items go stale
        assert spec.visibility_timeout_s >= 6 * spec.worker_timeout_s
        assert spec.max_receive_count >= 5 and spec.handler == "handlers.worker.handler"
        assert pipeline.provider in spec.providers


def test_the_reclaim_job_is_registered_with_an_interval_and_both_queues():
    spec = CATALOG.job("reclaim_listings")
    assert spec.schedule == "rate(5 minutes)" and spec.interval_s == 300
    assert set(spec.queues) == {"listing_generation", "listing_publish"}
    assert spec.load().__name__ == "build_reclaim_listings"
    items = CATALOG.tables["listing_items"]
    assert items.partition_key == ("batch_key", "S") and items.indexes[0].sort_key == ("updated_at", "N")


def test_a_wakeup_carries_exactly_three_keys():
    key = ItemKey("acme", "b1", "i1")
    assert parse_wakeup(key.body()) == key
    for body in ('{"tenant":"acme","batch":"b1"}', "[]", "", '{"tenant":"a#b","batch":"b1","item":"i1"}',
                 '{"tenant":"acme","batch":"b1","item":"i1","kind":"publish"}'):
        with pytest.raises(InvalidEvent):
            parse_wakeup(body)


def test_an_invalid_wakeup_error_never_echoes_the_body():
    with pytest.raises(InvalidEvent) as err:
        parse_wakeup('{"tenant":"acme","batch":"b1","item":"i1","secret":"hunter2"}')
    assert "hunter2" not in str(err.value)


def test_batch_refs_parse_tenant_slash_batch():
    assert BatchRef.parse("acme/b1") == BatchRef("acme", "b1")
    with pytest.raises(ValueError):
        BatchRef.parse("b1")


def test_retry_delays_double_and_stay_within_sqs_limits():
    t = Timing()
    assert [t.retry_delay(a) for a in range(1, 6)] == [30, 60, 120, 240, 240]


def test_reclaim_keys_spread_over_the_shards():
    shards = {reclaim_key("generation", ItemStatus.PENDING, ItemKey("t", "b", f"i{i}")) for i in range(2000)}
    assert len(shards) == RECLAIM_SHARDS


def test_the_fake_generator_fails_n_times_then_returns_the_same_listing():
    gen = FakeItemProvider(GENERATOR)
    req = ItemRequest("acme", "acme:b1:i1", {"title": "x"})
    gen.script(req.idempotency_key, Behaviour.FAIL_TIMES, times=2)
    for _ in range(2):
        with pytest.raises(ProviderError):
            gen.call(req, 1)
    first = gen.call(req, 1)
    assert gen.call(req, 1) == first and gen.created() == 1


def test_the_fake_marketplace_publishes_each_key_once_and_acts_out_scripts():
    mkt = FakeItemProvider(PUBLISHER)
    req = ItemRequest("acme", "acme:p1:i1", {})
    assert mkt.call(req, 1) == mkt.call(req, 1) and mkt.created() == 1
    mkt.script("k-timeout", Behaviour.TIME_OUT)
    mkt.script("k-reject", Behaviour.REJECT)
    mkt.script("k-fail", Behaviour.FAIL)
    with pytest.raises(ProviderTimeout):
        mkt.call(ItemRequest("acme", "k-timeout", {}), 1)
    with pytest.raises(ProviderRejected):
        mkt.call(ItemRequest("acme", "k-reject", {}), 1)
    with pytest.raises(ProviderError):
        mkt.call(ItemRequest("acme", "k-fail", {}), 1)
    assert mkt.created() == 1


def test_a_hung_fake_call_returns_once_released():
    import threading

    gen = FakeItemProvider(GENERATOR)
    gen.script("k", Behaviour.HANG)
    errors = []
    t = threading.Thread(target=lambda: errors.append(_call(gen)))
    t.start()
    gen.calls.release()
    t.join(5)
    assert not t.is_alive() and isinstance(errors[0], ProviderTimeout)


def _call(gen):
    try:
        gen.call(ItemRequest("acme", "k", {}), 1)
    except Exception as exc:  # noqa: BLE001
        return exc
    return None
