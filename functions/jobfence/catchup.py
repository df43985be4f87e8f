"""The catch-up policy: which past tick, if any, a job should run once for now.

`due(spec, ledger_entries, now_ms)` is a pure function of the job's ledger
(`jobfence.ledger`). With `catch_up = "once"` it returns the last expected tick
inside the job's window that was `missed` or `disabled`, when no run has
answered, held, gated or made up for a tick since; else None (always None
under `"none"`). Several missed ticks give one catch-up: only the last one is
returned, and its run, once started, covers every earlier one.

    window ──────────────────────────────────────────────┐ now
      08:00 ran   09:00 missed   10:00 missed   11:00 missed   -> 11:00
      08:00 ran   09:00 missed   10:00 ran                     -> None (a run since)
      08:00 ran   09:00 missed (made_up_by=R)                  -> None (caught up)

Whoever acts on it (the auditor, `jobfence enable JOB --catch-up`) invokes the
job's own function with a catch-up trigger for that tick (`jobfence.triggers`).
`due` is only the prediction: the runner's acquire is conditioned on no term
having started since the tick, in the same write as the lease and the gate, so
a duplicate, late or racing catch-up runs nothing (`skipped_served`).

Two rules keep it from acting too early:

- a tick younger than the ledger's delivery tolerance is not missed yet (its
  EventBridge event may still be on its way; a catch-up then would race it);
- a rule still disabled is not caught up: the operator stopped it on purpose.
  The state comes from the toggles when given (`RuleToggles.read`), else from
  the latest tick (`disabled` means the rule was off at its last tick).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jobfence.ledger import DELIVERY_TOLERANCE_MS, LedgerEntry, TickLabel, Toggle, enabled_at
from jobfence.registry import CatchUp, JobSpec

GAPS = (TickLabel.MISSED, TickLabel.DISABLED)  # what a catch-up stands in for


def due(
    spec: JobSpec, ledger_entries: Iterable[LedgerEntry], now_ms: int, toggles: Sequence[Toggle] | None = None
) -> int | None:
    """The tick (epoch ms) to catch up now, or None. Pure: reads only its arguments."""
    if spec.catch_up != CatchUp.ONCE or not spec.catch_up_window_s:
        return None
    entries = sorted((e for e in ledger_entries if e.tick_at <= now_ms), key=lambda e: e.tick_at)
    settled = now_ms - DELIVERY_TOLERANCE_MS  # a later tick may still be on its way: not missed yet
    past = [e for e in entries if e.tick_at <= settled]
    if not past or any(e.label not in GAPS for e in entries[len(past) :]):
        return None
    enabled = enabled_at(toggles, now_ms + 1) if toggles is not None else past[-1].label is not TickLabel.DISABLED
    if not enabled:
        return None
    last = past[-1]  # a later tick answered, held or gated by a run means a run started since any earlier gap
    if last.tick_at < now_ms - spec.catch_up_window_s * 1000 or last.label not in GAPS or last.made_up_by is not None:
        return None
    return last.tick_at


__all__ = ["GAPS", "due"]
