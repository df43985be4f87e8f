"""The operator tooling works on any app's catalog (`jobfence_ops.app`): found from --app, $JOBFENCE_APP, the nearest
pyproject.toml's [tool.jobfence] or cdk.json's context, in that order; errors say where it looked and why."""

from __future__ import annotations

import io
import json
import pathlib
import sys
import uuid

import pytest
from rich.console import Console

from jobfence_ops.app import APP_ENV, AppError, default_app, load_app
from jobfence_ops.cli import main

CATALOG_MODULE = """
from jobfence import JobSpec, Registry, TableSpec

CATALOG = Registry(
    tables=[TableSpec(name="things", subsystem="demo", partition_key=("id", "S"))],
    jobs=[JobSpec(name="{job}", subsystem="demo", entry="x:y", schedule="rate(1 hour)", interval_s=3600)],
)
NOT_A_CATALOG = 42
"""


def an_app(root: pathlib.Path, job: str = "tidy_things", config: str = "pyproject") -> str:
    """An app directory with its catalog in functions/<unique package>; returns the package name."""
    package = f"app_{uuid.uuid4().hex[:8]}"
    (root / "functions" / package).mkdir(parents=True)
    (root / "functions" / package / "__init__.py").write_text("")
    (root / "functions" / package / "catalog.py").write_text(CATALOG_MODULE.format(job=job))
    if config == "pyproject":
        (root / "pyproject.toml").write_text(f'[tool.jobfence]\napp = "{package}.catalog:CATALOG"\n')
    elif config == "cdk":
        (root / "cdk.json").write_text(
            json.dumps({"app": "python app.py", "context": {"jobfence:app": f"{package}.catalog:CATALOG"}})
        )
    return package


@pytest.fixture(autouse=True)
def isolated(monkeypatch):
    monkeypatch.delenv(APP_ENV, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))


def test_the_app_is_found_from_the_nearest_pyproject_and_its_functions_import(tmp_path):
    # GIVEN an app whose catalog lives in its functions/ directory, and a working directory below it
    an_app(tmp_path, job="tidy_things")
    below = tmp_path / "docs" / "deep"
    below.mkdir(parents=True)
    # WHEN the tooling looks from there
    app = load_app(start=below)
    # THEN it found that app: its catalog (imported from functions/), its directory, no batches
    assert set(app.catalog.jobs) == {"tidy_things"}
    assert app.root == tmp_path.resolve()
    assert app.batches is None and app.local.stubs is None


def test_cdk_context_names_the_app_when_no_pyproject_does(tmp_path):
    an_app(tmp_path, job="from_cdk", config="cdk")
    assert set(load_app(start=tmp_path).catalog.jobs) == {"from_cdk"}


def test_an_explicit_spec_wins_over_the_environment_and_the_files(tmp_path, monkeypatch):
    found = an_app(tmp_path, job="in_pyproject")
    other = tmp_path / "other"
    other.mkdir()
    explicit = an_app(other, job="explicit", config="none")
    sys.path.insert(0, str(other / "functions"))
    monkeypatch.setenv(APP_ENV, f"{found}.catalog:CATALOG")
    assert set(load_app(start=tmp_path).catalog.jobs) == {"in_pyproject"}  # the environment over nothing
    assert set(load_app(f"{explicit}.catalog:CATALOG", start=tmp_path).catalog.jobs) == {"explicit"}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon_here", "is not MODULE:ATTR"),
        ("nowhere_module_x:CATALOG", "cannot import 'nowhere_module_x'"),
        ("{package}.catalog:MISSING", "has no 'MISSING'"),
        ("{package}.catalog:NOT_A_CATALOG", "is a int, not a jobfence Registry"),
    ],
)
def test_a_bad_spec_is_refused_with_what_is_wrong(tmp_path, spec, says):
    package = an_app(tmp_path)
    with pytest.raises(AppError, match=says):
        load_app(spec.format(package=package), start=tmp_path)


def test_no_app_found_says_how_to_name_one(tmp_path):
    with pytest.raises(AppError, match=r"no jobfence app found .*--app MODULE:ATTR.*JOBFENCE_APP.*\[tool.jobfence\]"):
        load_app(start=tmp_path)


def test_this_repository_names_its_own_catalog_batches_and_local_hooks(monkeypatch):
    monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[2])
    app = default_app()
    assert "reclaim_listings" in app.catalog.jobs
    assert app.batches is not None and "generation" in app.batches.pipelines
    assert app.local.stubs == "ops.stubs" and app.local.secret_values is not None
    # each club job's signing and verify secrets are seeded with the two halves of one pair
    seed = app.local.secret_values()
    signing, verify = seed("club_signing_key_expire_memberships"), seed("club_verify_key_expire_memberships")
    assert signing and verify and signing != verify
    assert seed("club_signing_key_expire_memberships") == signing
    assert seed("discord_token") is None


def run_cli(argv: list[str]) -> tuple[int, str]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, highlight=False)
    return main(argv, console=console, errors=console), buffer.getvalue()


def test_the_cli_checks_job_names_against_the_apps_catalog(tmp_path, monkeypatch, capsys):
    # GIVEN another team's app directory (not this repository's)
    an_app(tmp_path, job="tidy_things")
    monkeypatch.chdir(tmp_path)
    # WHEN a command names a job of this repository, THEN it is refused with the app's own jobs
    with pytest.raises(SystemExit) as exited:
        run_cli(["runs", "reclaim_listings"])
    assert exited.value.code == 2
    assert "unknown job 'reclaim_listings'; jobs: tidy_things" in capsys.readouterr().err
    # WHEN the app has no durable batches, THEN a batch command says so in one line (exit 2)
    code, text = run_cli(["batch", "list", "--embedded"])
    assert code == 2
    assert "declares no durable batches" in text and "[tool.jobfence] batches" in text


def test_outside_any_app_the_cli_says_how_to_name_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, text = run_cli(["status", "--embedded"])
    assert code == 2
    assert "no jobfence app found" in " ".join(text.split())


def test_the_cli_takes_the_app_on_its_command_line(tmp_path, monkeypatch, capsys):
    # GIVEN a directory with no app settings, and an app's catalog importable
    package = an_app(tmp_path, job="tidy_things", config="none")
    monkeypatch.chdir(tmp_path)
    sys.path.insert(0, str(tmp_path / "functions"))
    # WHEN --app names it (after the command, as every option may be), THEN its jobs are the ones checked
    with pytest.raises(SystemExit) as exited:
        run_cli(["runs", "other_job", "--app", f"{package}.catalog:CATALOG"])
    assert exited.value.code == 2
    assert "unknown job 'other_job'; jobs: tidy_things" in capsys.readouterr().err


def test_the_operator_wheel_declares_what_its_commands_import():
    """`jobfence status` outside this repository failed with `No module named 'rich'`: every third-party
    package the CLI, console and local runtime import is a declared dependency of jobfence-ops."""
    import ast
    import tomllib

    root = pathlib.Path(__file__).resolve().parents[2]
    declared = {
        dep.split("[")[0].split("=")[0].split(">")[0].split("<")[0].strip().replace("-", "_")
        for dep in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    # import name -> the declared distribution that brings it (directly, or as its own declared dependency)
    provided_by = {"aws_lambda_powertools": "jobfence", "boto3": "jobfence", "botocore": "jobfence",
                   "werkzeug": "moto", "jobfence": "jobfence"}
    imported = set()
    for path in (root / "jobfence_ops").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
            imported |= {n.split(".")[0] for n in names}
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "jobfence_ops"}
    missing = {m for m in third_party if provided_by.get(m, m) not in declared}
    assert not missing, f"imported by the operator tooling, declared nowhere: {sorted(missing)}"


def test_this_repositorys_sim_command_replays_a_seed_with_its_trace_on_the_console(monkeypatch):
    # the simulator's kernel prints nothing itself: a replay hands each trace line to the CLI's console
    monkeypatch.chdir(pathlib.Path(__file__).resolve().parents[2])
    code, text = run_cli(["sim", "--replay", "3", "--family", "lease"])
    lines = text.splitlines()
    assert code == 0 and lines[-1].startswith("seed 3 (lease): ok; faults injected:")
    assert len(lines) > 10 and all("s " in line for line in lines[:5])  # "   0.000s actor  text": the trace, live
