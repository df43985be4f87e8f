"""The console's charts: inline SVG rendered on the server (no script, no library, no style attribute).

Each mark is an SVG `rect` with a class naming what it counts and a `fill` presentation attribute
(the page's Content-Security-Policy allows no inline style, and a presentation attribute is not one):

- `sparkline(labels)`: a job's last expected ticks, oldest first, one bar each, coloured by what became
  of the tick (`jobfence.ledger.TickLabel`: ran, skipped, failed, missed, ...);
- `throughput(finished, start, end)`: a batch's items finished per time bucket, completed stacked under
  failed, from the item rows' `updated_at` (the rows are the truth, not the batch's counters);
- `progress(done, failed, total)`: one bar of a batch's completed and failed share.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape

from jobfence_ops.render import when

SPARK_TICKS = 48  # a sparkline's bars: the last 48 ticks (two days of an hourly job, four hours of a 5-minute one)
SPARK_BAR_W, SPARK_GAP, SPARK_H = 4, 1, 16
BUCKETS = 24  # a throughput chart's time buckets
MIN_BUCKET_MS = 1000  # a batch finished within a second is drawn over 24 s, not over 24 ms
CHART_W, CHART_H = 360, 80
PROGRESS_W, PROGRESS_H = 256, 14

# what a tick's label looks like: a good run, a quiet non-run, a bad one (the page's .ok/.muted/.bad colours)
GOOD, QUIET, BAD, OPEN = "#2e9e4f", "#b8bdcc", "#c8372d", "#e0a526"
TICK_KIND = {
    "ran": "ran",
    "running": "running",
    "skipped_interval": "skipped",
    "skipped_leased": "skipped",
    "disabled": "disabled",
    "failed": "failed",
    "lease_lost": "failed",
    "died": "failed",
    "missed": "missed",
}
KIND_FILL = {"ran": GOOD, "running": OPEN, "skipped": QUIET, "disabled": QUIET, "failed": BAD, "missed": BAD}
# a bad tick stands out by height as well as colour (a colour-blind reader sees it too)
KIND_HEIGHT = {"ran": 10, "running": 10, "skipped": 5, "disabled": 3, "failed": SPARK_H, "missed": SPARK_H}


def sparkline(labels: Sequence[str], limit: int = SPARK_TICKS) -> str:
    """The last `limit` ticks' labels (oldest first) as bars; an empty chart says there was no tick."""
    shown = list(labels)[-limit:]
    if not shown:
        return "<span class='spark muted'>no tick</span>"
    marks = []
    for n, label in enumerate(shown):
        kind = TICK_KIND.get(label, "skipped")
        h = KIND_HEIGHT[kind]
        marks.append(
            f"<rect class='mark {kind}' x='{n * (SPARK_BAR_W + SPARK_GAP)}' y='{SPARK_H - h}' width='{SPARK_BAR_W}' "
            f"height='{h}' fill='{KIND_FILL[kind]}'><title>{escape(label)}</title></rect>"
        )
    width = len(shown) * (SPARK_BAR_W + SPARK_GAP)
    counts = ", ".join(f"{k}={n}" for k, n in _tally(TICK_KIND.get(label, "skipped") for label in shown))
    return (
        f"<svg class='spark' width='{width}' height='{SPARK_H}' viewBox='0 0 {width} {SPARK_H}' role='img' "
        f"aria-label='last {len(shown)} tick(s): {escape(counts)}'>{''.join(marks)}</svg>"
    )


def _tally(kinds: Iterable[str]) -> list[tuple[str, int]]:
    seen: dict[str, int] = {}
    for kind in kinds:
        seen[kind] = seen.get(kind, 0) + 1
    return sorted(seen.items())


@dataclass(frozen=True)
class Bucket:
    """Items that finished in [start, end): completed and failed."""

    start: int
    end: int
    completed: int
    failed: int


def buckets(finished: Iterable[tuple[int, str]], start: int, end: int, count: int = BUCKETS) -> list[Bucket]:
    """(updated_at, status) of the finished items, counted into `count` equal buckets of [start, end]."""
    end = max(end, start + count * MIN_BUCKET_MS)
    size = -(-(end - start) // count)
    done, failed = [0] * count, [0] * count
    for at, status in finished:
        n = min(max(at - start, 0) // size, count - 1)
        if status == "completed":
            done[n] += 1
        elif status == "failed":
            failed[n] += 1
    return [Bucket(start + n * size, start + (n + 1) * size, done[n], failed[n]) for n in range(count)]


def throughput(finished: Iterable[tuple[int, str]], start: int, end: int, count: int = BUCKETS) -> str:
    """A batch's items (updated_at, status) finished over time: per bucket a green bar (completed) under a red
    one (failed); items not finished (pending, running) are not drawn."""
    counted = buckets(finished, start, end, count)
    peak = max((b.completed + b.failed for b in counted), default=0)
    if not peak:
        return "<p class='chart muted' id='throughput'>no item has finished yet</p>"
    bar_w = CHART_W / count
    marks = []
    for n, b in enumerate(counted):
        base = float(CHART_H)
        for kind, value, fill in (("completed", b.completed, GOOD), ("failed", b.failed, BAD)):
            if not value:
                continue
            h = CHART_H * value / peak
            base -= h
            marks.append(
                f"<rect class='mark {kind}' x='{n * bar_w + 1:.1f}' y='{base:.1f}' width='{bar_w - 2:.1f}' "
                f"height='{h:.1f}' fill='{fill}'><title>{value} {kind} from {escape(when(b.start))}</title></rect>"
            )
    total_done, total_failed = sum(b.completed for b in counted), sum(b.failed for b in counted)
    return (
        f"<figure class='chart' id='throughput'><svg width='{CHART_W}' height='{CHART_H}' "
        f"viewBox='0 0 {CHART_W} {CHART_H}' role='img' aria-label='{total_done} completed, {total_failed} failed'>"
        f"<line x1='0' y1='{CHART_H}' x2='{CHART_W}' y2='{CHART_H}' stroke='#99a'/>{''.join(marks)}</svg>"
        f"<figcaption class='muted'>items finished per {_span(counted[0])} from {escape(when(start))}: "
        f"{total_done} completed, {total_failed} failed (peak {peak} a bucket)</figcaption></figure>"
    )


def _span(bucket: Bucket) -> str:
    ms = bucket.end - bucket.start
    for unit, size in (("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms >= size:
            return f"{ms / size:.3g} {unit}"
    return f"{ms} ms"


def progress(done: int, failed: int, total: int) -> str:
    """A batch's completed (green) and failed (red) share of its items, as one bar."""
    total = max(total, 1)
    w_done = PROGRESS_W * min(done, total) / total
    w_failed = PROGRESS_W * min(failed, total - min(done, total)) / total
    return (
        f"<svg class='bar' width='{PROGRESS_W}' height='{PROGRESS_H}' viewBox='0 0 {PROGRESS_W} {PROGRESS_H}' "
        f"role='img' aria-label='{done} completed, {failed} failed of {total}'>"
        f"<title>{done} completed, {failed} failed of {total}</title>"
        f"<rect width='{PROGRESS_W}' height='{PROGRESS_H}' rx='3' fill='#e4e6ee'/>"
        f"<rect class='done' width='{w_done:.1f}' height='{PROGRESS_H}' fill='{GOOD}'/>"
        f"<rect class='failed' x='{w_done:.1f}' width='{w_failed:.1f}' height='{PROGRESS_H}' fill='{BAD}'/></svg>"
    )
