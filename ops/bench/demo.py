"""Benchmark: `make demo` (the simulated day on a fresh embedded runtime), wall and CPU seconds.

The demo runs as `make demo` runs it (`python -m jobfence_ops demo`, here with
`--no-live`), in a child process; its CPU is that process's and every
process it waited for (the isolates, the CDK synth when the cache is cold):
`resource.getrusage` RUSAGE_CHILDREN, plus RUSAGE_SELF of this process (which
only waits). The demo's own exit status is checked: a day whose invariants fail
is no benchmark. Goal (issue 27): at most 150 s wall and 120 CPU-s on an idle
2-core machine; past either, the page shows the figures and the run exits 1.

`DEMO_HOURS` simulates fewer hours (the figure is then not the goal's).
The section also carries the profile of a simulated hour of the local
runtime, which says where the time goes: `python -m ops.bench.demo --profile-hour`
starts a runtime, seeds it as the day does, runs one simulated hour to warm
every isolate, then one steady hour, and prints that hour's requests to the
emulator by operation and its CPU seconds (the driver process with moto's
server, and the isolates); under `py-spy record --subprocesses` it gives the
sampled profile.
"""

from __future__ import annotations

import collections
import os
import pathlib
import resource
import subprocess
import sys
import time
from typing import Any

from jobfence_ops.runtime.template import CACHE_DIR, inputs_hash
from ops.bench.coldstart import GoalMissed

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMMAND = "python -m ops.bench ops.bench.demo"
GOAL_WALL_S = 150
GOAL_CPU_S = 120
SEED = 7

# The runs recorded before this one (the table keeps them when the bench rewrites the section).
EARLIER_RUNS = (
    "| kept-alive connections, Lambda invokes in the isolates (953203f) | cached | 9.0 | 1599 | 779 | MISSED |",
    "| and the reclaim sweep reading only open batches' shards (merge of 634ed60, f347e53) | included (cold cache) "
    "| 5.2 | 348 | 256 | MISSED |",
    "| the base of issue 27's runtime branch, synth cached (4be0900) | cached | 7.3, 6.2 | 418 | 244 | MISSED |",
    "| isolates forked from a fork server that preloaded the layer's libraries (47994ad) | cached | 10.5, 6.9 | 452 "
    "| 228 | MISSED |",
    "| and moto's backend lookup kept per host (cc54e5f) | cached | 6.0, 7.3 | 354 | 217 | MISSED |",
    "| and botocore's data loader shared by every session of a process (29af8a0), merged | cached | 1.4, 3.6 | 202 "
    "| 190 | MISSED |",
    "| main at 3db700e (issue 28's work-family changes merged), a clean clone after `.ci/run`, idle machine | cached "
    "| 2.0, 1.9 | 152 | 168 | MISSED |",
    "| main at ea09bc6 (moto's shortcuts, the auditor's one read, this session's security and club merges), a clean clone after `.ci/run`, idle machine, bytecode not written (`PYTHONDONTWRITEBYTECODE=1`, as this machine sets) | cached | 2.1, 2.3 | 121 | 141 | MISSED |",
    "| the same, bytecode written as `make demo` lets it (its first run: the function code compiled once) | cached | 2.1, 2.6 | 110 | 131 | MISSED |",
    "| the same, second run | cached | 2.6, 1.8 | 125 | 140 | MISSED |",
    "| main at 88f5482 (after the transaction snapshot), idle machine, 2 December | cached | 0.4, 2.1 | 117 | 137 | MISSED |",
)

BEFORE = """Before (36644d1, issue 27): `make demo` took **864 CPU-s** (18 min wall at load about 2 on 2 cores; 110 s wall
at e83065a). `python -m jobfence_ops demo --hours 1 --no-live` (which ran 5 simulated hours: `--hours` did not bound the
scenario's fixed phases) took 248 CPU-s and 8 min 43 s wall at load 5-19 (`/usr/bin/time -v`)."""

PROFILE = """### Where a simulated hour goes (the local runtime's profile)

Command: `python -m ops.bench.demo --profile-hour` (one steady simulated hour after a first one that cold-starts
every isolate: requests to the emulator by operation, CPU of the driver process with moto's server and of the
isolates), and for the samples `py-spy record --subprocesses --format raw --rate 40 -- python -m ops.bench.demo
--profile-hour` (py-spy is not a project dependency). The CPU figures move with the machine's load (given with
each row); the request counts are exact.

| one steady simulated hour (60 ticks) | load | requests | CPU-s | driver + moto | isolates |
|---|---:|---:|---:|---:|---:|
| before (36644d1) | 7-19 | 3,863 | 26.4 | 16.5 | 9.9 |
| after the kept-alive connections (cc0094c) | 7-19 | 3,863 | 22.3 | 13.8 | 8.5 |
| after the reclaim shards (4be0900) | 8-9 | 791 | 8.7 | 6.5 | 2.3 |
| after the forked isolates and moto's host cache (47994ad, cc54e5f) | 4-6 | 791 | 6.4 | 4.6 | 1.8 |

| requests / hour | operation |
|---:|---|
| 267 | DynamoDB Query |
| 236 | DynamoDB UpdateItem |
| 67 | DynamoDB GetItem (131 before the auditor's BatchGetItem) |
| 60 | DynamoDB PutItem |
| 39 | SQS ReceiveMessage |
| 18 | DynamoDB DeleteItem |
| 13 / 12 | Lambda ListEventSourceMappings / EventBridge ListRules (the runtime reading live states) |
| 19 | the rest (BatchWriteItem 7, TransactWriteItems 5, BatchGetItem 5, Scan 2) |

Samples at 36644d1 (py-spy, all processes): 55% in the emulator's request threads (werkzeug, Flask, moto), 30% in
the isolates (two thirds of it the reclaim sweep's queries), the rest the driver. Werkzeug's development server
**closed the connection after every response**: each request paid a TCP connect, a new server thread and a
10 ms drain wait; a GetItem round trip cost 5.5 ms CPU (client and server in one process), 2.6 ms on kept-alive
connections. The reclaim sweep made 80% of that hour's requests (3,096 of 3,863: 258 queries a tick); since the
reclaim shards (issue 27 part 1) a steady hour makes 791.

**Simulated hour 1** (`/usr/bin/time -v python -m jobfence_ops demo --no-live --seed 7 --hours 1`, synth cached, children
included): 52 CPU-s (46 user, 6 sys; 91 s wall at load 6-7) at 4be0900; 35 CPU-s (31 user, 5 sys; 59 s wall at
load 5-6) with the isolates forked from the fork server. Its py-spy samples at 4be0900 (busy samples only, load
6-10): a third of the samples were the 22 isolates' cold starts (interpreter start 16%, imports 17%: boto3,
botocore, pydantic, pynamodb and Powertools about 2.5 of the 3.7 s a handler module took to import at that load,
the function's own packages the rest), 7% their botocore clients' creation, 25% moto's server, the rest the driver.
Since then an isolate is forked from a fork server that imported those libraries once (`jobfence_ops.runtime.workers`):
its cold start imports only its function's code.

**The steady hour** (thread CPU time of moto's request threads during the steady hour at 4be0900, load 8-10): of
the driver's 5.2 CPU-s, 4.4 were inside moto's WSGI app (5.6 ms a request at that load), 0.2 werkzeug's HTTP
handling around it, 0.3 the driver's own thread (schedules, pumps), the rest the invocation threads. Inside moto
(cProfile of 300 replayed GetItems): its response serializer about a quarter, Flask's dispatch an eighth, and the
lookup of the backend serving the request's host a fifth: moto listed and stat'ed its ~200 package folders and
matched its URL patterns on every request. That lookup is now kept per host (`jobfence_ops.emulator`): a GetItem's time
in moto's app 1.97 -> 1.55 ms, an UpdateItem's 3.45 -> 3.18 ms (two runs, at load 10 and 17).

**moto's own DynamoDB and SQS work** (issue 27, second round; `jobfence_ops.moto_fast`, every shortcut checked against
moto's own answer by `tests/unit/test_moto_fast.py`). A yappi profile of the steady hour's server threads
(`yappi.set_clock_type("cpu")`, started after the first simulated hour; yappi inflates call-heavy code, so the
shares are the guide, not the seconds) put a quarter of moto's time in its response serializer, which walks the
output shape member by member (72,000 value lookups an hour) to print a dict that moto had already built in the
wire's shape, and another quarter in the update-expression validator, whose ten tree walkers rebuilt their
handler tables at every node. For DynamoDB's data-plane operations the body is now that dict (its `None`
members dropped, blobs in base64), and each walker builds its table once. The steady hour's driver CPU went
5.0 -> 2.8 s (the same load, 5-11). The profile of simulated hour 3 (the day's listings batch: 1,939 requests)
then showed moto's SQS checking each received message's retention by building every attribute of its queue
(counting all its messages, a clock read per message: 3,041 attribute builds, 1.2 million clock reads); it now
reads the one attribute, and the counts read the clock once: hour 3's driver CPU 11.9 -> 9.5 s.

Fewer requests per tick: the missed-run auditor reads the 16 audited jobs' rule histories in one consistent
BatchGetItem instead of 16 GetItems (a steady hour: 791 -> 731 requests), and a cron expression's next fire is
kept per instant (the driver asked croniter again for every rule at every step: 0.2 CPU-s an hour).

| one steady simulated hour (60 ticks) | load | requests | CPU-s | driver + moto | isolates |
|---|---:|---:|---:|---:|---:|
| before this round (f4aed1c) | 5-11 | 791 | 7.0 | 5.0 | 2.0 |
| moto's serializer and validator shortcuts | 5-11 | 791 | 4.4 | 2.8 | 1.5 |

Per simulated hour of the whole day after this round (`RUSAGE_SELF` of the driver and the isolates' `/proc` CPU at
each hour's progress line, load 5-7): hour 1 (every isolate's cold start) 13.6 CPU-s, hour 3 (the batch) 12.7,
a steady hour 3.5-4.3, the three hours of the day's outage about 0.1 each.

Then moto's TransactWriteItems: to undo a refused transaction it deep-copied every table the transaction
names, every item of it (a third of moto's time in hour 3); it now keeps deep copies of the named items only
(`jobfence_ops.moto_fast`, 39241b7). Measured after it on an idle machine (the bench, 2 December): 117 s wall, 137 CPU-s:
within the earlier runs' spread, so not the slowdown one loaded run had suggested.

**Third round** (issue 27; yappi over the steady hour's threads, `yappi.set_clock_type("cpu")`, started after the
first simulated hour; the script drives `LocalRuntime` as `--profile-hour` does). Of moto's time per request:

- every Query sorted the **whole table** (`Table.all_items` sorts all items by their keys, comparing moto's typed
  values: 90,000 `__lt__` an hour) before keeping the queried partition; the runs table grows all day, so this
  grew too. A table query now lists its partition, an index query its candidates unsorted (moto then sorts them
  by the index's and the table's keys, a total order);
- an UpdateItem **parsed its expression twice, deep-copied the tree** and walked it with ten validators, two of
  which depend on the expression and its names alone; the parse is kept per string, copied from its pickle, those
  two run once per (expression, names), and each walker finds a node's handler once per node class
  (`isinstance` against moto's abstract node classes was a third of each walk: 290,000 calls an hour);
- a condition expression's tokens are kept per string; moto's dispatch listed its handler's methods
  (`inspect.getmembers`) at every request, and drew each request id a character at a time.

Every shortcut is checked against moto's own path (`tests/unit/test_moto_fast.py`, `verifying()`). And fewer
requests: a job may yield its last batch as `LastBatch` (`jobfence.batch`), so the runner ends the run there
instead of renewing the lease to find the generator exhausted (the catalog's sweeps, retentions, auditor and
schedule jobs do: 48 renewals an hour fewer), and the auditor reads no runs of a cron job with no tick in its
window. A steady hour: 731 -> 662 requests.

| one steady simulated hour (60 ticks) | load | requests | CPU-s | driver + moto | isolates |
|---|---:|---:|---:|---:|---:|
| before this round (88f5482; the per-hour reading of the day) | 1-3 | 731 | 4.5-5.0 | 3.0-3.5 | 1.5 |
| moto's query, update and dispatch shortcuts; `LastBatch`; the auditor's cron skip (6a13ba4) | 8-13 | 662 | 2.6 | 1.5 | 1.1 |

Per simulated hour of the whole day after this round (the same `RUSAGE_SELF` and `/proc` reading, load 5-11):
start (imports, deploy) 4.3 CPU-s, hour 1 9.3, hour 3 7.3, a steady hour 2.1-2.6, the day 66 CPU-s before its
report (130 before this round, at load 1-3).

**What remains** is per request: Flask's and werkzeug's dispatch, moto's condition parse and the update walk
that do depend on values, botocore in the isolates, times about 660 requests an hour; and hour 1's cold starts."""


def synth_cached() -> bool:
    """Whether the CDK synthesis is cached for this checkout (a cold cache adds the synth to the figure)."""
    ctx: dict = {}
    return (ROOT / CACHE_DIR / inputs_hash(ROOT, ctx) / "manifest.json").is_file()


def measure(hours: float | None = None) -> tuple[float, float, str, int]:
    """Run the demo once: (wall s, CPU s of it and its children, its last output lines, its exit status)."""
    command = [sys.executable, "-m", "jobfence_ops", "demo", "--no-live", "--seed", str(SEED)]
    if hours is not None:
        command += ["--hours", f"{hours:g}"]
    before_self = resource.getrusage(resource.RUSAGE_SELF)
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=ROOT,
        capture_output=True,
        text=True,
        # as `make demo` runs it: the Makefile unexports PYTHONDONTWRITEBYTECODE (the function code compiles once)
        env={
            **{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
            "COLUMNS": "120",
            "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        },
    )
    wall = time.monotonic() - started
    after_self = resource.getrusage(resource.RUSAGE_SELF)
    after_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = sum(
        getattr(after, f) - getattr(before, f)
        for after, before in ((after_self, before_self), (after_children, before_children))
        for f in ("ru_utime", "ru_stime")
    )
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-3:])
    return wall, cpu, tail, done.returncode


def run() -> str:
    hours = float(os.environ["DEMO_HOURS"]) if os.environ.get("DEMO_HOURS") else None
    cached = synth_cached()
    load = os.getloadavg()[0]
    wall, cpu, tail, status = measure(hours)
    load_end = os.getloadavg()[0]
    if status != 0:
        raise RuntimeError(f"the demo itself failed (exit {status}): {tail}")
    day = "the full day (24 simulated hours)" if hours is None else f"{hours:g} simulated hours (not the goal's figure)"
    missed = []
    if hours is None and wall > GOAL_WALL_S:
        missed.append(f"{wall:.0f} s wall > {GOAL_WALL_S} s")
    if hours is None and cpu > GOAL_CPU_S:
        missed.append(f"{cpu:.0f} CPU-s > {GOAL_CPU_S} CPU-s")
    lines = [
        "## Local runtime",
        "",
        f"Command: `{COMMAND}` (runs `python -m jobfence_ops demo --no-live --seed {SEED}`, {day}, in a child process; "
        f"CPU = RUSAGE_SELF + RUSAGE_CHILDREN: the demo, its isolates, its synth). Goal: at most **{GOAL_WALL_S} s wall** "
        f"and **{GOAL_CPU_S} CPU-s** on an idle 2-core machine; the bench exits 1 past either.",
        "",
        "The machine is shared (2 cores, other sessions' suites and benches running): the load average says how "
        "busy it was; contention inflates the CPU figure too (less than the wall figure).",
        "",
        "| run | synth | load average (1 min) at start, at end | wall s | CPU s | goal |",
        "|---|---|---:|---:|---:|---|",
        *EARLIER_RUNS,
        f"| this run | {'cached' if cached else 'included (cold cache)'} | {load:.1f}, {load_end:.1f} | {wall:.0f} | "
        f"{cpu:.0f} | {'MISSED' if missed else ('met' if hours is None else 'n/a')} |",
        "",
        BEFORE,
        "",
        PROFILE,
    ]
    section = "\n".join(lines)
    if missed:
        raise GoalMissed(section, missed, what="make demo")
    return section


def _isolates_cpu(runtime: Any) -> float:
    """CPU seconds of the runtime's live isolates so far (from /proc: they are not waited for yet)."""
    total = 0.0
    for function in runtime.topology.functions:
        for isolate in runtime.pool.isolates(function):
            try:
                fields = pathlib.Path(f"/proc/{isolate.pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def profile_hour() -> int:
    """One steady simulated hour of the demo's runtime: requests by operation, CPU of the driver and the isolates."""
    from jobfence_ops.emulator import point_process_at
    from jobfence_ops.runtime.runtime import LocalRuntime
    from ops.day import HOUR, DayConfig, DayScenario
    from ops.seeds import seed_domains

    counts: collections.Counter = collections.Counter()
    runtime = LocalRuntime.start()
    try:
        server = runtime.emulator._server
        assert server is not None
        app = server.invokes  # the outermost WSGI layer: every request passes it
        inner = app.__call__

        def counting(environ: dict, start_response: Any) -> Any:
            target = (
                environ.get("HTTP_X_AMZ_TARGET")
                or f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO', '')[:40]}"
            )
            counts[target] += 1
            return inner(environ, start_response)

        server._server.app = counting
        point_process_at(runtime.emulator)
        scenario = DayScenario(runtime, DayConfig(), SEED)
        runtime.advance_to(scenario.start_ms)
        scenario._seed_retention()
        seed_domains(runtime)
        runtime.advance_to(scenario.start_ms + HOUR)  # the first hour: every isolate's cold start
        counts.clear()
        usage = resource.getrusage(resource.RUSAGE_SELF)
        driver, isolates, wall = usage.ru_utime + usage.ru_stime, _isolates_cpu(runtime), time.monotonic()
        timeline = runtime.advance_to(scenario.start_ms + 2 * HOUR)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        driver = usage.ru_utime + usage.ru_stime - driver
        isolates = _isolates_cpu(runtime) - isolates
        print(
            f"one steady simulated hour: {len(timeline.ticks)} ticks, {sum(counts.values())} requests, "
            f"{time.monotonic() - wall:.0f} s wall, {driver + isolates:.1f} CPU-s "
            f"(driver and moto's server {driver:.1f}, isolates {isolates:.1f})"
        )
        for name, n in counts.most_common(15):
            print(f"{n:7d}  {name}")
    finally:
        runtime.stop()
    return 0


if __name__ == "__main__":
    if sys.argv[1:] != ["--profile-hour"]:
        raise SystemExit(
            "usage: python -m ops.bench.demo --profile-hour   (the bench itself: python -m ops.bench ops.bench.demo)"
        )
    raise SystemExit(profile_hour())
