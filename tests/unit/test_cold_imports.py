"""A function loads only its own job's code and the stores it uses; the catalog is data.

Each check runs a fresh interpreter (a cold start) and reads the modules it
loaded: a catalog entry that imported its job's module, a job module that
imported another job's store, or a package `__init__` that imported all of its
modules, shows up here as a foreign module. Every scheduled job of the catalog
is checked with the environment its function gets in the template
(`jobfence_cdk.access.CatalogResources.environment`, with stand-in table and queue
names: no synthesis), the interpreters started all at once so the file stays fast.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from types import SimpleNamespace

import pytest

from jobfence.config import queue_env
from jobfence_cdk.access import CatalogResources
from jobs.catalog import CATALOG
from jobs.listings.catalog import BATCHES_TABLE, ITEMS_TABLE

pytestmark = pytest.mark.slow  # each test starts Python processes (cold imports)

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"
LIST_MODULES = "import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))\n"
WORK_TABLES = {BATCHES_TABLE, ITEMS_TABLE}  # a job that declares one of them uses the work store (jobfence.work)


def start(statement: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", LIST_MODULES.format(statement=statement)], cwd=FUNCTIONS,
                            env={**os.environ, "PYTHONPATH": str(FUNCTIONS), **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def modules_of(process: subprocess.Popen) -> set[str]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return set(out.split())


def loaded(statement: str, env: dict[str, str] | None = None) -> set[str]:
    return modules_of(start(statement, env))


def job_code(modules: set[str]) -> set[str]:
    """The modules of jobs/ that are not catalog data."""
    return {m for m in modules if m.startswith("jobs.") and m.rsplit(".", 1)[-1] != "catalog" and m.count(".") > 1}


def template_environment(spec) -> dict[str, str]:
    """The variables infra writes into the spec's function (physical names stood in by logical ones)."""
    resources = CatalogResources(
        tables={name: SimpleNamespace(table_name=f"t-{name}") for name in CATALOG.tables},
        queues={name: SimpleNamespace(queue_url=f"https://sqs.invalid/{name}") for name in CATALOG.queues},
    )
    return resources.environment(spec)


def entry_module(spec) -> str:
    return spec.entry.partition(":")[0]


@pytest.fixture(scope="module")
def scheduled_cold_starts() -> dict[str, set[str]]:
    """Every scheduled job's function, built in its own fresh interpreter: the modules each loaded."""
    started = {name: start("import handlers.scheduled", template_environment(spec))
               for name, spec in CATALOG.jobs.items()}
    return {name: modules_of(process) for name, process in started.items()}


def test_the_catalog_is_data_it_imports_no_job_store_provider_or_heavy_library():
    # WHEN only the catalog is imported
    modules = loaded("import jobs.catalog")
    # THEN no job module, store, provider, nor the libraries they need, was loaded
    assert job_code(modules) == set()
    heavy = {"pynamodb", "pydantic", "boto3", "botocore", "aws_lambda_powertools", "cryptography", "providers"}
    assert {m.split(".")[0] for m in modules} & heavy == set()
    assert {m for m in modules if m.startswith("jobfence.work.")} <= {"jobfence.work.timing"}


@pytest.mark.parametrize("job", sorted(CATALOG.jobs))
def test_a_scheduled_function_loads_no_other_jobs_module_nor_the_work_store(job, scheduled_cold_starts):
    # GIVEN the job's function built with its template environment (the cold start)
    spec, modules = CATALOG.jobs[job], scheduled_cold_starts[job]
    # THEN no other job's entry module (a module two jobs share is each one's own)
    others = {entry_module(s) for s in CATALOG.jobs.values()} - {entry_module(spec)}
    assert modules & others == set()
    # nor any job code of another subsystem
    assert {m for m in job_code(modules) if m.split(".")[1] != spec.subsystem} == set()
    # nor the work store unless the job declares its tables (the catalog's Timing is data)
    uses_work = bool(WORK_TABLES & set(spec.tables))
    if not uses_work:
        assert {m for m in modules if m.startswith("jobfence.work.")} <= {"jobfence.work.timing"}
    # nor a provider, or the club's signing, unless the job declares a provider or a secret
    if not spec.providers and not spec.secrets:
        assert {m for m in modules if m.startswith(("providers", "cryptography"))} == set()


def test_the_reclaimer_loads_the_work_store_but_neither_the_worker_nor_the_item_providers(scheduled_cold_starts):
    # reclaim_listings re-sends wake-ups and moves rows: the store and the SQS adapter, never an item's run
    modules = scheduled_cold_starts["reclaim_listings"]
    assert {"jobfence.work.store", "jobfence.work.sqs", "jobs.listings.stores"} <= modules
    worker_side = {"jobfence.work.worker", "jobfence.work.pipeline", "jobfence.work.fairness", "jobs.listings.pipelines",
                   "jobfence.work.claims", "jobfence.work.transactions"}
    assert modules & worker_side == set()
    # nor the producer's input or the operator's report
    assert {"jobfence.work.inputs", "jobfence.work.report"} & modules == set()
    assert {m for m in modules if m.startswith("providers")} == set()


def test_a_retention_job_loads_its_own_store_and_not_its_sibling_s(scheduled_cold_starts):
    # clean_dpop_proofs and clean_conversations share a module, not a store
    assert job_code(scheduled_cold_starts["clean_dpop_proofs"]) == {"jobs.commerce.retention",
                                                                    "jobs.commerce.dpop_proofs"}
    assert job_code(scheduled_cold_starts["clean_conversations"]) == {"jobs.commerce.retention",
                                                                      "jobs.commerce.conversations"}


def test_a_club_job_that_publishes_nothing_loads_no_event_signing(scheduled_cold_starts):
    # retry_email_intake commits plain record changes: no outbox, no signed events, no Secrets Manager
    modules = scheduled_cold_starts["retry_email_intake"]
    assert {"jobs.club.events", "jobs.club.signing", "jobs.club.notifications", "jobs.club.stores.outbox",
            "providers.secrets"} & modules == set()
    assert "cryptography" not in {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("job", ["sync_darkroom_stats", "reconcile_membership_roles"])
def test_a_publishing_job_s_cold_start_loads_its_events_but_not_their_signing(job, scheduled_cold_starts):
    # a tick that sends nothing (most of them) needs the events and the outbox, not the publisher: its Secrets
    # Manager and SQS adapters and the signing are loaded by the first send (`jobs.club.changes.PublisherOnFirstSend`)
    modules = scheduled_cold_starts[job]
    assert {"jobs.club.events", "jobs.club.stores.outbox"} <= modules
    assert {"jobs.club.signing", "jobs.club.notifications", "providers.secrets", "providers.sqs"} & modules == set()
    assert "cryptography" not in {m.split(".")[0] for m in modules}


@pytest.mark.parametrize("job", sorted(job for job, spec in CATALOG.jobs.items() if "paypal" in spec.providers))
def test_a_paypal_job_s_cold_start_loads_no_paypal_adapter(job, scheduled_cold_starts):
    # a tick that finds no row needing PayPal (most of them) needs the payment port's errors, not the adapter: its
    # module, HTTP client and Secrets Manager client are built by the first capture or refund
    # (`providers.payments.paypal_on_first_call`)
    modules = scheduled_cold_starts[job]
    assert "providers.payments" in modules
    assert {"providers.paypal", "providers.http", "providers.secrets"} & modules == set()


def test_a_listings_worker_loads_its_pipeline_and_no_scheduled_job():
    env = template_environment(CATALOG.queues["listing_generation"]) | {"WORKER_QUEUE": "listing_generation"}
    modules = loaded("import handlers.worker", env)
    assert job_code(modules) == {"jobs.listings.pipelines", "jobs.listings.stores"}
    assert "jobfence.work.stale" not in modules  # the reclaimer's types: a worker never reads stale items
    # and the claim's code is loaded at its init, not by its first message (every tick claims)
    assert {"jobfence.work.claims", "jobfence.work.transactions"} <= modules
    assert "cryptography" not in {m.split(".")[0] for m in modules}


SCHEDULED_RUNTIME = {"jobfence.runs", "jobfence.lease", "jobfence.triggers", "aws_lambda_powertools.utilities.parser"}


@pytest.mark.parametrize(("queue", "module"), [("listing_generation", "handlers.worker"),
                                               ("club_notifications", "handlers.discord")])
def test_a_queue_worker_loads_none_of_the_scheduled_runtime(queue, module):
    # GIVEN a queue worker's cold start with its template environment
    env = template_environment(CATALOG.queues[queue]) | {"WORKER_QUEUE": queue, queue_env(queue): "https://sqs.invalid/q"}
    modules = loaded(f"import {module}", env)
    # THEN no run store, lease, trigger parsing nor the EventBridge parser: no worker tick uses them (a worker's
    # error text is `jobfence.dynamo.safe_error`, not the run store's)
    assert SCHEDULED_RUNTIME & modules == set()


LAMBDA = {"LAMBDA_TASK_ROOT": "/var/task", "AWS_LAMBDA_FUNCTION_NAME": "f"}  # as deployed: Powertools' Tracer is on


def test_a_scheduled_tick_s_init_builds_no_validator_it_does_not_need():
    # GIVEN a scheduled function's cold start with the Tracer on, as deployed
    spec = CATALOG.jobs["clean_dpop_proofs"]
    statement = ("import sys, handlers.scheduled, jobfence.config as c\n"
                 "print('built', 'jobfence.trigger_requests' in sys.modules,"
                 " c.WorkerSettings.__pydantic_complete__, c.ScheduledSettings.__pydantic_complete__)")
    process = subprocess.run([sys.executable, "-c", statement], cwd=FUNCTIONS, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(FUNCTIONS), **template_environment(spec), **LAMBDA})
    assert process.returncode == 0, process.stderr
    # THEN its own settings were validated, and neither the requests' models and validator (a manual, catch-up or
    # buffered trigger defines and builds them on its first: `jobfence.trigger_requests`) nor the worker's settings
    # model was built
    assert process.stdout.split()[-4:] == ["built", "False", "False", "True"]


def test_the_health_function_patches_nothing_so_loads_no_aws_sdk():
    # GIVEN the health function's cold start with the Tracer on: it calls neither AWS nor a provider
    modules = loaded("import handlers.health", LAMBDA)
    # THEN the X-Ray SDK patched nothing, so the SDK's clients and sessions were never imported (Powertools'
    # user agent imports botocore's top package alone, under a millisecond)
    assert "aws_xray_sdk.core" in modules
    assert {"boto3", "botocore.client", "botocore.session", "aws_xray_sdk.ext.botocore.patch"} & modules == set()


def test_the_rotation_function_loads_no_pynamodb_model_code():
    # GIVEN the signing key rotation's cold start: it calls Secrets Manager only, and classifies its errors
    modules = loaded("import handlers.rotate_signing_key", LAMBDA)
    # THEN neither the binding nor pynamodb's models and connections were loaded (the error classification needs
    # only pynamodb's exception classes)
    assert {"jobfence.binding", "pynamodb.models", "pynamodb.connection"} & modules == set()
    assert "cryptography" in {m.split(".")[0] for m in modules}  # every rotation step signs or checks a key pair
