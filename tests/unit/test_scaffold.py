"""`jobfence new job`: refusals are one bounded line and write nothing; what it plans for a new or an existing subsystem.

The scaffold run end to end (its test green, the new function and rule in the
synthesized template) is tests/functional/test_scaffold_new_job.py (slow).
"""

from __future__ import annotations

import io
import pathlib
import shutil

import pytest
from rich.console import Console

from jobfence_ops.cli import main
from jobfence_ops.commands.scaffold import ScaffoldError, plan_job

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"


@pytest.fixture
def app(tmp_path) -> pathlib.Path:
    """An app root with this repository's catalog modules (all the scaffold reads)."""
    shutil.copytree(FUNCTIONS / "jobs", tmp_path / "functions" / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def tree(root: pathlib.Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name,subsystem,schedule,message", [
    ("Bad-Name", "reports", "rate(1 hour)", "job name 'Bad-Name' must be lower_snake_case"),
    ("x" * 300, "reports", "rate(1 hour)", "job name 'xxxxxxxx"),
    ("class", "reports", "rate(1 hour)", "not a Python keyword"),
    ("double__underscore", "reports", "rate(1 hour)", "single underscores"),
    ("digest", "Reports", "rate(1 hour)", "subsystem 'Reports' must be lower_snake_case"),
    ("digest", "shared", "rate(1 hour)", "subsystem 'shared' is reserved"),
    ("digest", "reports", "rate(1 hours)", "a rate is rate(1 minute|hour|day)"),
    ("digest", "reports", "rate(2 hour)", "a rate is rate(1 minute|hour|day)"),
    ("digest", "reports", "every hour", "is not an EventBridge rate(...) or cron(...)"),
    ("digest", "reports", "cron(0 3 * *)", "EventBridge cron has 6 fields"),
    ("digest", "reports", "rate(0 minutes)", "the rate must be positive"),
    ("clean_dpop_proofs", "commerce", "rate(1 hour)", "a job or table named 'clean_dpop_proofs' is already in the catalog"),
    ("dpop_proofs", "commerce", "rate(1 hour)", "a job or table named 'dpop_proofs' is already"),
])
def test_a_bad_request_is_refused_in_one_bounded_line_and_writes_nothing(app, name, subsystem, schedule, message):
    before = tree(app)
    with pytest.raises(ScaffoldError, match=message.replace("(", r"\(").replace(")", r"\)").replace("|", r"\|")
                       .replace("*", r"\*").replace(".", r"\.")) as refused:
        plan_job(app, name, subsystem, schedule).write()
    assert len(str(refused.value)) < 300 and "\n" not in str(refused.value)
    assert tree(app) == before


def test_a_file_in_the_way_is_refused_before_anything_is_written(app):
    (app / "events").mkdir()
    (app / "events" / "scheduled_tick_digest.json").write_text("{}")
    before = tree(app)
    with pytest.raises(ScaffoldError, match="events/scheduled_tick_digest.json exists already"):
        plan_job(app, "digest", "reports", "rate(1 hour)").write()
    assert tree(app) == before


def test_a_directory_that_is_not_an_app_is_refused(tmp_path):
    with pytest.raises(ScaffoldError, match="not a jobfence app"):
        plan_job(tmp_path, "digest", "reports", "rate(1 hour)")
    assert list(tmp_path.iterdir()) == []


def test_a_new_subsystem_gets_a_package_and_is_registered_in_the_catalog(app):
    scaffold = plan_job(app, "digest", "reports", "rate(1 hour)")
    assert sorted(scaffold.files) == [
        "events/scheduled_tick_digest.json", "functions/jobs/catalog.py", "functions/jobs/reports/__init__.py",
        "functions/jobs/reports/catalog.py", "functions/jobs/reports/digest.py", "tests/unit/test_job_digest.py"]
    top = scaffold.files["functions/jobs/catalog.py"]
    assert "from jobs.reports import catalog as reports\n" in top
    assert "*reports.JOBS)" in top and "*reports.TABLES]," in top
    entry = scaffold.files["functions/jobs/reports/catalog.py"]
    assert 'schedule="rate(1 hour)"' in entry and "interval_s=3600" in entry and '"digest_rows": "scan+update"' in entry


def test_an_existing_subsystem_gets_its_entry_appended_and_the_rest_of_its_catalog_kept(app):
    original = (app / "functions/jobs/backoffice/catalog.py").read_text()
    scaffold = plan_job(app, "digest", "backoffice", "cron(0 3 * * ? *)")
    assert "functions/jobs/catalog.py" not in scaffold.files  # already registered
    text = scaffold.files["functions/jobs/backoffice/catalog.py"]
    assert text.startswith(original.rstrip("\n")) and "interval_s=86400" in text  # a daily cron: its gap is the gate
    assert "from jobfence.registry import JobSpec, TableSpec  # noqa" not in text  # the catalog imports both already


def test_the_cli_prints_what_it_wrote_and_exits_2_with_one_line_on_a_refusal(app):
    out = io.StringIO()
    console = Console(file=out, width=200, highlight=False)
    assert main(["new", "job", "digest", "--subsystem", "reports", "--schedule", "rate(1 hour)", "--root", str(app)],
                console=console) == 0
    assert "functions/jobs/reports/digest.py" in out.getvalue()
    assert (app / "functions/jobs/reports/digest.py").is_file()
    # the next step is a command to copy: whole on its line, even on a console narrower than it
    narrow = io.StringIO()
    assert main(["new", "job", "weekly_digest_of_everything", "--subsystem", "reports", "--schedule", "rate(1 day)",
                 "--root", str(app)], console=Console(file=narrow, width=40, highlight=False)) == 0
    assert "next: .venv/bin/python -m pytest tests/unit/test_job_weekly_digest_of_everything.py\n" in narrow.getvalue()
    out.truncate(0)
    before = tree(app)
    assert main(["new", "job", "digest", "--subsystem", "reports", "--schedule", "rate(1 hour)", "--root", str(app)],
                console=console) == 2
    assert out.getvalue().strip().count("\n") == 0 and "already in the catalog" in out.getvalue()
    assert tree(app) == before
