"""A function loads only its own job's code and the stores it uses; the catalog is data.

Each check runs a fresh interpreter (a cold start) and reads the modules it
loaded: a catalog entry that imported its job's module, or a package
`__init__` that imported all of its modules, shows up here as a foreign module.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"
LIST_MODULES = "import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))\n"


def loaded(statement: str, env: dict[str, str] | None = None) -> set[str]:
    done = subprocess.run([sys.executable, "-c", LIST_MODULES.format(statement=statement)], cwd=FUNCTIONS,
                          env={**os.environ, "PYTHONPATH": str(FUNCTIONS), **(env or {})},
                          capture_output=True, text=True, check=True)
    return set(done.stdout.split())


def job_code(modules: set[str]) -> set[str]:
    """The modules of jobs/ that are not catalog data."""
    return {m for m in modules if m.startswith("jobs.") and m.rsplit(".", 1)[-1] != "catalog" and m.count(".") > 1}


def test_the_catalog_is_data_it_imports_no_job_store_provider_or_heavy_library():
    # WHEN only the catalog is imported
    modules = loaded("import jobs.catalog")
    # THEN no job module, store, provider, nor the libraries they need, was loaded
    assert job_code(modules) == set()
    heavy = {"pynamodb", "pydantic", "boto3", "botocore", "aws_lambda_powertools", "cryptography", "providers"}
    assert {m.split(".")[0] for m in modules} & heavy == set()
    assert {m for m in modules if m.startswith("jobfence.work.")} <= {"jobfence.work.timing"}


def test_a_scheduled_function_loads_its_own_job_and_no_other():
    # GIVEN clean_dpop_proofs's environment WHEN its handler is built (the cold start)
    env = {"JOB_NAME": "clean_dpop_proofs", "LEASES_TABLE": "leases-t", "RUNS_TABLE": "runs-t",
           "TABLE_DPOP_PROOFS": "dpop-t"}
    modules = loaded("import handlers.scheduled", env)
    # THEN the only job code loaded is its own entry's module and the store it uses
    assert job_code(modules) == {"jobs.commerce.retention", "jobs.commerce.dpop_proofs", "jobs.commerce.conversations"}
    # and nothing of the listings pipelines, the work store, the providers or the club's signing
    assert not {m for m in modules if m.startswith(("jobfence.work.", "providers", "cryptography"))} - {
        "jobfence.work.timing"}


def test_a_listings_worker_loads_its_pipeline_and_no_scheduled_job():
    env = {"WORKER_QUEUE": "listing_generation", "QUEUE_LISTING_GENERATION": "https://sqs.example/q",
           "TABLE_LISTING_BATCHES": "b-t", "TABLE_LISTING_ITEMS": "i-t", "TABLE_LISTING_QUOTA": "q-t",
           "PROVIDER_GENERATOR_URL": "https://generator.example"}
    modules = loaded("import handlers.worker", env)
    assert job_code(modules) == {"jobs.listings.pipelines"}
    assert "cryptography" not in {m.split(".")[0] for m in modules}
