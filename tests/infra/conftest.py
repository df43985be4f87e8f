"""Synthesized templates, built once per test session (jsii synthesis is slow).

- `synthesized`: the app exactly as `make synth` builds it from the real
  catalog (app.py's `OPTIONS`), cdk-nag packs included, minus dependency bundling.
- `probe`: the same app from the real catalog plus a few probe entries that
  exercise what the real catalog may not have yet (a work queue, secrets, a
  provider, a second subsystem's table) and the health API, so every
  construct is tested whatever has landed.
- `disabled_template`: the real catalog with `-c schedules=disabled`.
- `adopted`: an outside app's existing stack (the invoices example's catalog and code, its handler moved)
  to which `JobfenceJobs` is added with another runtime, architecture and handler, over one table the
  app imports by name and one it creates itself.

If nag refuses an app, its report is kept for `test_infra_nag` and the other
tests get a template synthesized without the packs, so one finding does not
hide the rest.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import tempfile
from dataclasses import dataclass

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import pytest  # noqa: E402


@dataclass
class Synthesis:
    catalog: object
    stack: object
    template: object  # aws_cdk.assertions.Template
    nag_report: dict | None  # validation-report.json of the nag packs
    nag_error: str | None  # the message when the packs refused the app

    @property
    def resources(self) -> dict:
        return self.template.to_json()["Resources"]


def synthesize(catalog, overrides=None, **context):
    """Build the app as app.py does (nag off unless asked), without bundling; return (stack, Template)."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from app import OPTIONS
    from jobfence_cdk import SKIP_BUNDLING_CONTEXT, build_app

    app = App(context={**SKIP_BUNDLING_CONTEXT, "nag": "false", **context}, outdir=tempfile.mkdtemp(prefix="cdk-"))
    stack = build_app(app, catalog, **{**OPTIONS, **(overrides or {})})
    return stack, Template.from_stack(stack)


def synthesize_with_nag(catalog, **overrides) -> Synthesis:
    """Synthesize with the nag packs like `make synth`; keep the validation report."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from app import OPTIONS
    from jobfence_cdk import SKIP_BUNDLING_CONTEXT, build_app
    from jobfence_cdk.app import STACK_NAME

    outdir = pathlib.Path(tempfile.mkdtemp(prefix="cdk-"))
    app = App(context={**SKIP_BUNDLING_CONTEXT, "nag": "true"}, outdir=str(outdir))
    stack = build_app(app, catalog, **{**OPTIONS, **overrides})
    report = outdir / "validation-report.json"
    try:
        app.synth()
    except RuntimeError as exc:
        stack, template = synthesize(catalog, overrides)
        return Synthesis(catalog, stack, template, json.loads(report.read_text()) if report.exists() else None, str(exc))
    template = Template.from_json(json.loads((outdir / f"{STACK_NAME}.template.json").read_text()))
    return Synthesis(catalog, stack, template, json.loads(report.read_text()), None)


def probe_catalog():
    """The real catalog plus probe entries covering every construct and grant shape."""
    from jobfence.registry import CORE_TABLES, JobSpec, Overlap, QueueSpec, Registry, TableSpec
    from jobs.catalog import CATALOG

    core = {t.name for t in CORE_TABLES}
    template_job = next(iter(CATALOG.jobs.values()))
    domain_table = next(name for name, t in CATALOG.tables.items() if t.subsystem == template_job.subsystem)
    probe_queue = QueueSpec(
        name="probe_work",
        subsystem=template_job.subsystem,
        handler="handlers.scheduled.handler",  # any existing handler: only the wiring is under test
        worker_timeout_s=60,
        visibility_timeout_s=360,
        max_receive_count=5,
        max_concurrency=2,
        tables={domain_table: "read+write"},
        queues=("probe_work",),
        secrets=("probe_token",),
        description="probe queue",
    )
    probe_job = dataclasses.replace(
        template_job,
        name="probe_sender",
        schedule="rate(5 minutes)",
        interval_s=None,
        tables={domain_table: "read"},
        queues=("probe_work",),
        secrets=("probe_signing_key",),
        providers=("paypal",),
        overlap=Overlap.BUFFER_ONE,  # its hand-over grant: an async invoke of itself
        unfenced={},  # (the template's declaration names its own tables)
    )
    other_table = TableSpec(name="probe_ledger", subsystem="probe_backoffice", partition_key=("id", "S"), ttl_attribute="ttl")
    other_job = dataclasses.replace(
        template_job, name="probe_ledger_cleanup", subsystem="probe_backoffice", schedule="cron(15 3 * * ? *)",
        interval_s=None, tables={"probe_ledger": "read+write"}, unfenced={},
    )
    return Registry(
        tables=[*(t for n, t in CATALOG.tables.items() if n not in core), other_table],
        jobs=[*CATALOG.jobs.values(), probe_job, other_job],
        queues=[*CATALOG.queues.values(), probe_queue],
    )


SYNTHESES = {"synthesized", "probe", "each", "adopted"}


def pytest_collection_modifyitems(items) -> None:
    """A test that needs a synthesis (jsii, tens of seconds) is `slow`."""
    for item in items:
        if SYNTHESES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def synthesized() -> Synthesis:
    from jobs.catalog import CATALOG

    return synthesize_with_nag(CATALOG)


@pytest.fixture(scope="session")
def probe() -> Synthesis:
    return synthesize_with_nag(probe_catalog(), health=True)


@pytest.fixture(scope="session", params=["catalog", "probe"])
def each(request) -> Synthesis:
    """Both syntheses, for properties that must hold for every entry of any catalog."""
    return request.getfixturevalue("synthesized" if request.param == "catalog" else "probe")


@pytest.fixture(scope="session")
def stack(synthesized):
    return synthesized.stack


@pytest.fixture(scope="session")
def template(synthesized):
    return synthesized.template


@pytest.fixture(scope="session")
def resources(synthesized) -> dict:
    """Logical id -> resource of the real catalog's template."""
    return synthesized.resources


@pytest.fixture(scope="session")
def disabled_template():
    from jobs.catalog import CATALOG

    return synthesize(CATALOG, schedules="disabled")[1]


@pytest.fixture(scope="session")
def synthesize_app():
    """`synthesize(catalog, overrides, **context)` for tests that need their own (cheap, failing) synthesis."""
    return synthesize


EXAMPLE_FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "examples" / "invoices" / "functions"
ADOPTED_HANDLER = "entrypoints.tick.handler"  # the example's handlers/scheduled.py, moved: no handlers/ at all
IMPORTED_INVOICES = "billing-invoices-v1"  # the physical table the app already has (not in the template)


@dataclass
class Adoption:
    catalog: object
    stack: object  # the app's own stack
    jobs: object  # the JobfenceJobs added to it
    ledger: object  # the app's own Table, passed in
    template: object

    @property
    def resources(self) -> dict:
        return self.template.to_json()["Resources"]


def example_catalog():
    """The invoices example's catalog (loaded from its file: its package is not on this path), plus a ledger
    table its job also writes."""
    import dataclasses
    import importlib.util

    from jobfence.registry import Registry, TableSpec

    spec = importlib.util.spec_from_file_location("example_invoices_catalog", EXAMPLE_FUNCTIONS / "invoices" / "catalog.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ledger = TableSpec(name="ledger", subsystem=module.SUBSYSTEM, partition_key=("entry_id", "S"), sort_key=("at", "N"))
    job = dataclasses.replace(module.MARK_OVERDUE, tables={**module.MARK_OVERDUE.tables, "ledger": "put"})
    return Registry(tables=[module.INVOICES, ledger], jobs=[job])


def example_functions(where: pathlib.Path) -> pathlib.Path:
    """A copy of the example's code asset whose scheduled handler is `entrypoints/tick.py`."""
    import shutil

    functions = where / "functions"
    shutil.copytree(EXAMPLE_FUNCTIONS, functions, ignore=shutil.ignore_patterns("__pycache__"))
    (functions / "entrypoints").mkdir()
    (functions / "entrypoints" / "__init__.py").write_text("")
    (functions / "handlers" / "scheduled.py").rename(functions / "entrypoints" / "tick.py")
    shutil.rmtree(functions / "handlers")
    return functions


@pytest.fixture(scope="session")
def adopted(tmp_path_factory) -> Adoption:
    from aws_cdk import App, Stack
    from aws_cdk import aws_dynamodb as dynamodb
    from aws_cdk import aws_lambda as lambda_
    from aws_cdk import aws_sqs as sqs
    from aws_cdk.assertions import Template

    from jobfence_cdk import SKIP_BUNDLING_CONTEXT, JobfenceJobs

    where = tmp_path_factory.mktemp("adopted")
    catalog = example_catalog()
    app = App(context=SKIP_BUNDLING_CONTEXT, outdir=str(where / "cdk.out"))
    stack = Stack(app, "billing")  # the app's stack, with resources of its own
    sqs.Queue(stack, "Payments", queue_name="billing-payments", enforce_ssl=True)
    ledger = dynamodb.Table(
        stack,
        "Ledger",
        table_name="billing-ledger",
        partition_key=dynamodb.Attribute(name="entry_id", type=dynamodb.AttributeType.STRING),
        sort_key=dynamodb.Attribute(name="at", type=dynamodb.AttributeType.NUMBER),
    )
    jobs = JobfenceJobs(
        stack,
        "Jobfence",
        catalog=catalog,
        functions_dir=example_functions(where),
        prefix="billing",
        runtime=lambda_.Runtime.PYTHON_3_13,
        architecture=lambda_.Architecture.X86_64,
        handler=ADOPTED_HANDLER,
        tables={"invoices": dynamodb.Table.from_table_name(stack, "Invoices", IMPORTED_INVOICES), "ledger": ledger},
    )
    return Adoption(catalog, stack, jobs, ledger, Template.from_stack(stack))
