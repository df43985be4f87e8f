"""The console's charts (`jobfence_ops.console.charts`): inline SVG whose marks are the counts they draw.

GIVEN counts WHEN rendered THEN one mark per tick (sparkline) or per non-empty bucket and status (throughput),
each classed by what it counts, sized by it, and nothing the page's CSP would block (no style attribute).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from jobfence_ops.console import charts

SVG = "{http://www.w3.org/2000/svg}"


def marks(svg: str) -> list[dict[str, str]]:
    root = ET.fromstring(svg.replace("<svg ", "<svg xmlns='http://www.w3.org/2000/svg' ", 1))
    return [r.attrib for r in root.iter(f"{SVG}rect") if "mark" in r.attrib.get("class", "")]


def test_a_sparkline_has_one_bar_per_tick_coloured_by_what_became_of_it():
    labels = ["ran", "ran", "skipped_interval", "missed", "failed", "died", "disabled", "ran"]
    svg = charts.sparkline(labels)
    bars = marks(svg)
    assert [b["class"] for b in bars] == [
        "mark ran", "mark ran", "mark skipped", "mark missed", "mark failed", "mark failed", "mark disabled", "mark ran"
    ]
    # a bad tick is full height and red, a good one green and shorter, a quiet one grey and shorter still
    by_kind = {b["class"].split()[1]: b for b in bars}
    assert by_kind["missed"]["fill"] == by_kind["failed"]["fill"] == charts.BAD
    assert by_kind["ran"]["fill"] == charts.GOOD and by_kind["skipped"]["fill"] == charts.QUIET
    assert int(by_kind["missed"]["height"]) > int(by_kind["ran"]["height"]) > int(by_kind["skipped"]["height"])
    assert "aria-label='last 8 tick(s): disabled=1, failed=2, missed=1, ran=3, skipped=1'" in svg
    assert "style=" not in svg


def test_a_sparkline_shows_the_last_ticks_only_and_says_when_there_was_none():
    labels = ["missed"] * 10 + ["ran"] * charts.SPARK_TICKS
    assert {b["class"] for b in marks(charts.sparkline(labels))} == {"mark ran"}
    assert len(marks(charts.sparkline(labels))) == charts.SPARK_TICKS
    assert charts.sparkline([]) == "<span class='spark muted'>no tick</span>"


def test_throughput_counts_finished_items_per_bucket_completed_under_failed():
    # GIVEN a batch created at 0 whose items finished over 24 minutes (one bucket a minute)
    minute = 60_000
    finished = [(0, "completed"), (30_000, "completed"), (5 * minute, "completed"), (5 * minute + 1, "failed"),
                (23 * minute, "failed"), (7 * minute, "pending"), (8 * minute, "running")]
    counted = charts.buckets(finished, 0, 24 * minute, 24)
    assert [(b.completed, b.failed) for b in counted if b.completed or b.failed] == [(2, 0), (1, 1), (0, 1)]
    # WHEN drawn THEN one mark per bucket and status with any, heights in proportion to the peak bucket (2)
    svg = charts.throughput(finished, 0, 24 * minute, 24)
    bars = marks(svg)
    assert [b["class"] for b in bars] == ["mark completed", "mark completed", "mark failed", "mark failed"]
    heights = [float(b["height"]) for b in bars]
    assert heights == [charts.CHART_H, charts.CHART_H / 2, charts.CHART_H / 2, charts.CHART_H / 2]
    # the failed bar of bucket 5 sits on top of its completed one
    assert float(bars[2]["y"]) + float(bars[2]["height"]) == float(bars[1]["y"])
    assert "3 completed, 2 failed (peak 2 a bucket)" in svg and "per 1 min" in svg
    assert "style=" not in svg


def test_throughput_before_any_item_finished_says_so():
    assert "no item has finished yet" in charts.throughput([(5, "pending"), (6, "running")], 0, 100)


def test_an_item_past_the_last_bucket_counts_in_the_last():
    assert [b.failed for b in charts.buckets([(10_000, "failed")], 0, 1000, 4)] == [0, 0, 0, 1]


def test_the_progress_bar_is_an_svg_whose_widths_are_the_shares():
    svg = charts.progress(done=3, failed=1, total=4)
    widths = dict(re.findall(r"class='(done|failed)'[^>]*?width='([\d.]+)'", svg))
    assert float(widths["done"]) == charts.PROGRESS_W * 3 / 4 and float(widths["failed"]) == charts.PROGRESS_W / 4
    assert "3 completed, 1 failed of 4" in svg and "style=" not in svg


def test_a_batch_finished_in_an_instant_is_drawn_over_a_second_a_bucket():
    counted = charts.buckets([(5, "completed")], 5, 5, 24)
    assert counted[0].end - counted[0].start == charts.MIN_BUCKET_MS and counted[0].completed == 1
