"""`jobfence new job NAME --subsystem S --schedule EXPR`: a new job that passes its own tests and synthesizes.

    plan_job(root, name, subsystem, schedule)   every check first, every file's new text: a `Scaffold`
    Scaffold.write()                            then the files, nothing if a check failed

Writes (paths under the app root):
    functions/jobs/S/NAME.py          the job: bounded batches over its own table, a fenced write per row
    functions/jobs/S/catalog.py       its table and entry (appended; created with the package for a new S)
    functions/jobs/catalog.py         a new subsystem's catalog registered (new S only)
    tests/unit/test_job_NAME.py       its tests: a tick on moto, and the fault simulator with its invariant
    events/scheduled_tick_NAME.json   a sample tick of its rule (accepted at its `time`: to run it now,
                                      `jobfence invoke NAME manual_trigger`)

A refusal (`ScaffoldError`) is one bounded line naming what is wrong, and nothing is written.
"""

from __future__ import annotations

import keyword
import pathlib
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import pairwise

from jobfence.registry import JobSpec, Registry, TableSpec
from jobfence.schedule import GAP_START_MS, Schedule, ScheduleError
from jobfence_ops.commands import scaffold_templates as templates
from jobfence_ops.targets import OperatorError

NAME = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")
MAX_NAME = 40  # the function, rule and alarm names carry it after the stage prefix (64 characters at most)
MAX_SUBSYSTEM = 24
RESERVED_SUBSYSTEMS = {"shared", "catalog", "auditor", "jobs", "jobfence", "handlers", "providers"}
GAP_TICKS = 400  # ticks of a cron() schedule read for its shortest gap (the interval gate)
_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_IMPORT = re.compile(r"^from jobs\.\w+ import catalog as \w+\n", re.M)
_JOBS = re.compile(r"^(JOBS = \(.*)\)$", re.M)
_TABLES = re.compile(r"^(\s+tables=\[.*)\],$", re.M)


class ScaffoldError(OperatorError):
    """A scaffold that cannot be written; nothing was."""


@dataclass(frozen=True)
class Scaffold:
    """The files of one new job: path (under `root`) -> full new text, and which of them exist already."""

    root: pathlib.Path
    name: str
    files: Mapping[str, str]

    def write(self) -> list[str]:
        """Write every file (creating folders); the paths written, in order."""
        for relative, text in self.files.items():
            path = self.root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        return list(self.files)


def _shown(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def check_name(name: str, what: str, longest: int) -> str:
    if not NAME.match(name or "") or len(name) > longest or keyword.iskeyword(name):
        raise ScaffoldError(
            f"{what} {_shown(name)} must be lower_snake_case (a-z, 0-9, single underscores), "
            f"start with a letter, at most {longest} characters, and not a Python keyword"
        )
    return name


def interval_of(schedule: str) -> int:
    """The interval gate in seconds: a rate()'s period, or a cron()'s shortest gap. Raises ScaffoldError."""
    rate = _RATE.match(schedule)
    if schedule.startswith("rate(") and (not rate or (rate.group(1) == "1") != (not rate.group(2).endswith("s"))):
        raise ScaffoldError(
            f"schedule {_shown(schedule)}: a rate is rate(1 minute|hour|day) or rate(N minutes|hours|days)"
        )
    try:
        times = [Schedule(schedule, GAP_START_MS).next_after(GAP_START_MS)]
        for _ in range(GAP_TICKS if schedule.startswith("cron(") else 1):
            times.append(Schedule(schedule, GAP_START_MS).next_after(times[-1]))
    except (ScheduleError, ValueError, KeyError) as exc:
        raise ScaffoldError(
            f"schedule {_shown(schedule)} is not an EventBridge rate(...) or cron(...) expression: "
            f"{' '.join(str(exc).split())[:120]}"
        ) from None
    return min(b - a for a, b in pairwise(times)) // 1000


def plan_job(root: pathlib.Path, name: str, subsystem: str, schedule: str) -> Scaffold:
    """Check everything, then compute every file; raise ScaffoldError (nothing written) on the first problem."""
    check_name(name, "job name", MAX_NAME)
    check_name(subsystem, "subsystem", MAX_SUBSYSTEM)
    if subsystem in RESERVED_SUBSYSTEMS:
        raise ScaffoldError(f"subsystem {_shown(subsystem)} is reserved: pick another name")
    interval = interval_of(schedule)
    jobs_dir = root / "functions" / "jobs"
    top_catalog = jobs_dir / "catalog.py"
    if not top_catalog.is_file():
        raise ScaffoldError(
            f"{str(root)[:120]} is not a jobfence app: functions/jobs/catalog.py not found (use --root)"
        )
    table = f"{name}_rows"
    taken = _names_in_catalogs(jobs_dir)
    for wanted in (name, table):
        if wanted in taken:
            raise ScaffoldError(f"a job or table named {_shown(wanted)} is already in the catalog")
    fields = dict(
        name=name,
        subsystem=subsystem,
        schedule=schedule,
        table=table,
        interval=interval,
        half_interval=interval // 2,
        event_id=str(uuid.UUID(int=uuid.uuid5(uuid.NAMESPACE_URL, name).int)),
    )
    _check_entry(name, subsystem, schedule, interval, table)
    files: dict[str, str] = {}
    package = jobs_dir / subsystem
    if package.is_dir():
        catalog = package / "catalog.py"
        text = catalog.read_text() if catalog.is_file() else ""
        if not (re.search(r"^TABLES\b", text, re.M) and re.search(r"^JOBS\b", text, re.M)):
            raise ScaffoldError(f"functions/jobs/{subsystem}/catalog.py has no TABLES and JOBS to add the entry to")
        imported = any(
            {"JobSpec", "TableSpec"} <= set(re.findall(r"\w+", line))
            for line in re.findall(r"^from jobfence\.registry import .*$", text, re.M)
        )
        block = templates.APPENDED if not imported else templates.APPENDED_NO_IMPORT
        files[f"functions/jobs/{subsystem}/catalog.py"] = (
            text.rstrip("\n") + "\n" + block.substitute(fields) + templates.ENTRIES.substitute(fields)
        )
    elif (jobs_dir / f"{subsystem}.py").exists():
        raise ScaffoldError(f"functions/jobs/{subsystem}.py exists: a subsystem is a package, pick another name")
    else:
        files[f"functions/jobs/{subsystem}/__init__.py"] = templates.PACKAGE.substitute(fields)
        files[f"functions/jobs/{subsystem}/catalog.py"] = templates.NEW_CATALOG.substitute(
            fields
        ) + templates.ENTRIES.substitute(fields)
        files["functions/jobs/catalog.py"] = _register(top_catalog.read_text(), subsystem)
    written = {
        f"functions/jobs/{subsystem}/{name}.py": templates.JOB_MODULE.substitute(fields),
        f"tests/unit/test_job_{name}.py": templates.TEST.substitute(fields),
        f"events/scheduled_tick_{name}.json": templates.EVENT.substitute(fields),
    }
    for relative in written:
        if (root / relative).exists():
            raise ScaffoldError(f"{relative} exists already: nothing written")
    files.update(written)
    return Scaffold(root, name, files)


def _names_in_catalogs(jobs_dir: pathlib.Path) -> set[str]:
    """Every `name="..."` of the app's catalog modules (jobs and tables; read as text, not imported)."""
    found: set[str] = set()
    for path in jobs_dir.rglob("*.py"):
        found.update(re.findall(r"\bname\s*=\s*[\"']([a-z0-9_]+)[\"']", path.read_text()))
    return found


def _check_entry(name: str, subsystem: str, schedule: str, interval: int, table: str) -> None:
    """The entry as the registry will see it: refused here, with its message, rather than at synthesis."""
    from jobfence.registry import CatalogError

    try:
        Registry(
            tables=[TableSpec(name=table, subsystem=subsystem, partition_key=("row_id", "S"))],
            jobs=[
                JobSpec(
                    name=name,
                    subsystem=subsystem,
                    entry="unused:unused",
                    schedule=schedule,
                    interval_s=interval,
                    timeout_s=300,
                    tables={table: "scan+update"},
                )
            ],
        )
    except CatalogError as exc:
        raise ScaffoldError(str(exc)[:200]) from None


def _register(text: str, subsystem: str) -> str:
    """functions/jobs/catalog.py with a new subsystem's catalog imported and its jobs and tables gathered."""
    imports = list(_IMPORT.finditer(text))
    if not imports or not _JOBS.search(text) or not _TABLES.search(text):
        raise ScaffoldError(
            "functions/jobs/catalog.py does not have the shape the scaffold edits (its `from jobs.X "
            "import catalog as X` lines, `JOBS = (...)` and `tables=[...]`): register the subsystem by hand"
        )
    at = imports[-1].end()
    text = text[:at] + f"from jobs.{subsystem} import catalog as {subsystem}\n" + text[at:]
    text = _JOBS.sub(lambda m: f"{m.group(1)}, *{subsystem}.JOBS)", text, count=1)
    return _TABLES.sub(lambda m: f"{m.group(1)}, *{subsystem}.TABLES],", text, count=1)
