"""Pure checks of the durable-batch contract: timings, wake-up parsing, catalog entries, provider fakes."""

from __future__ import annotations

import pytest

from jobfence.errors import InvalidEvent
from jobfence.scheduled import load_job
from jobfence.work import (
    KEY_WRITES_PER_S,
    MAX_SHARDS,
    WRITES_PER_ITEM,
    BatchRef,
    ItemKey,
    ItemStatus,
    OpenBatch,
    StaleCutoffs,
    Timing,
    parse_wakeup,
    shard_of,
    shards_for,
)
from jobs.catalog import CATALOG
from jobs.listings.pipelines import PIPELINES
from providers.errors import ProviderAmbiguous, ProviderError, ProviderRejected
from providers.items_fake import Behaviour, FakeItemProvider
from providers.items import GENERATOR, PUBLISHER, ItemRequest


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
    assert load_job(spec).__name__ == "build_reclaim_listings"
    items = CATALOG.tables["listing_items"]
    # one row per item under its batch's partitions, and no index: an item's writes cost their own units only
    assert (items.partition_key, items.sort_key, items.indexes) == (("batch_key", "S"), ("item_id", "S"), ())


def test_a_wakeup_carries_the_keys_and_the_shard_of_the_row():
    key = ItemKey.of(BatchRef("acme", "b1"), "i1", 8)
    assert parse_wakeup(key.body()) == key and key.shard == shard_of("i1", 8)
    assert key.partition == f"acme#b1#{key.shard}"
    for body in ('{"tenant":"acme","batch":"b1"}', "[]", "", '{"tenant":"a#b","batch":"b1","item":"i1"}',
                 '{"tenant":"acme","batch":"b1","item":"i1","kind":"publish"}'):
        with pytest.raises(InvalidEvent):
            parse_wakeup(body)


def test_a_wakeup_sent_before_shard_counts_finds_its_row_under_64_shards():
    # GIVEN a body as producers wrote it before batches recorded their count (every batch had 64 shards)
    key = parse_wakeup('{"tenant":"acme","batch":"b1","item":"i1"}')
    # THEN its shard is the item's under 64 shards: the partition its row was written to
    assert key == ItemKey.of(BatchRef("acme", "b1"), "i1", MAX_SHARDS) and MAX_SHARDS == 64


@pytest.mark.parametrize("shard", ["-1", "64", "1000", "1.5", '"3"', "true", "null"])
def test_a_shard_outside_the_ring_or_not_an_integer_is_refused_with_a_bounded_error(shard):
    body = '{"tenant":"acme","batch":"b1","item":"i1","shard":%s}' % shard
    if shard == "null":  # an explicit null reads as absent: the 64-shard default
        assert parse_wakeup(body).shard == shard_of("i1", 64)
        return
    with pytest.raises(InvalidEvent) as err:
        parse_wakeup(body)
    assert "shard" in str(err.value) and len(str(err.value)) < 200


def test_the_shard_count_follows_the_batch_size_and_the_rate():
    # GIVEN the rule: the smallest power of two keeping min(size, rate) x 3 writes / shards <= 500 on a key
    assert [shards_for(n) for n in (1, 12, 166, 167, 334, 1_000, 5_000, 10_000)] == [1, 1, 1, 2, 4, 8, 32, 64]
    # a batch worked slower needs only what its rate puts on a key in a second
    assert shards_for(10_000, rate_items_per_s=100) == 1
    assert shards_for(10_000, rate_items_per_s=1_000) == 8
    for n in (1, 12, 999, 4_321, 10_000):
        s = shards_for(n)
        assert s <= MAX_SHARDS and s & (s - 1) == 0
        assert min(n, 10_000) * WRITES_PER_ITEM / s <= KEY_WRITES_PER_S or s == MAX_SHARDS
    with pytest.raises(ValueError):
        shards_for(0)


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


def test_an_open_batch_names_exactly_the_partitions_its_items_live_in():
    # GIVEN an 8-shard batch WHEN its items' keys are taken
    ref = BatchRef("acme", "b1")
    used = {ItemKey.of(ref, f"i{i}", 8).partition for i in range(500)}
    # THEN they are the partitions the reclaimer reads for it, and no other
    assert used == set(OpenBatch(ref, 0, 8).item_partitions()) == {f"acme#b1#{s}" for s in range(8)}


def test_stale_cutoffs_are_per_status():
    cutoffs = StaleCutoffs(running=100, pending=200)
    assert (cutoffs.of(ItemStatus.RUNNING), cutoffs.of(ItemStatus.PENDING)) == (100, 200)


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
    with pytest.raises(ProviderAmbiguous):
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
    assert not t.is_alive() and isinstance(errors[0], ProviderAmbiguous)


def _call(gen):
    try:
        gen.call(ItemRequest("acme", "k", {}), 1)
    except Exception as exc:  # noqa: BLE001
        return exc
    return None


def test_an_invalid_wakeup_error_is_bounded_whatever_the_field_names():
    # a 1 MB unknown field name (or three) gives an error of a few hundred characters, not 1 MB
    body = '{"tenant":"acme","batch":"b1","item":"i1",' + ",".join(f'"{c * 1_000_000}":1' for c in "xyz") + "}"
    with pytest.raises(InvalidEvent) as err:
        parse_wakeup(body)
    assert len(str(err.value)) < 400 and "xxxx" in str(err.value)
