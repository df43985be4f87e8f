"""The example outside-team app (examples/invoices/) passes its own tests and synthesizes, from the wheels.

As a team elsewhere would: the wheels of the runtime (its test kit and fault simulator among it) and the
constructs, built as `make dist` builds them, are installed (here into a throwaway directory on
PYTHONPATH, offline, without dependencies: the venv has them; not the operator tooling), then, in the
example's directory, its own test suite runs (its job under moto and under the fault simulator, its app under cdk-nag) and its `app.py`
synthesizes as `cdk synth` runs it (cdk.json's context, the cdk-nag packs on, bundling skipped).
Nothing of this repository but the wheels is on the path.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.wheels import build_wheels

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "invoices"
PACKAGES = [ROOT / "packages" / "jobfence", ROOT / "packages" / "jobfence-cdk"]

pytestmark = pytest.mark.slow


def run(args: list[str], cwd: pathlib.Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_the_example_app_passes_its_tests_and_synthesizes_from_the_wheels(tmp_path):
    # GIVEN the runtime's and the constructs' wheels, built as `make dist` builds them, installed where only they are
    dist, site = tmp_path / "dist", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    build_wheels(dist, PACKAGES)
    subprocess.run([*pip, "install", "--quiet", "--no-deps", "--no-index", "--target", str(site),
                    *map(str, sorted(dist.glob("*.whl")))], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env.update(PYTHONPATH=str(site), JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION="20", AWS_DEFAULT_REGION="us-east-1")

    # WHEN the example's own tests run in its directory
    tests = run([sys.executable, "-m", "pytest", "-rp"], EXAMPLE, env)  # -rp: a PASSED line per test
    # THEN they pass, against the installed packages, the fault simulator's seeds among them
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert " passed" in tests.stdout and "skipped" not in tests.stdout
    assert "PASSED tests/test_faults.py::test_under_faults_the_past_due_invoices_and_only_they_become_overdue" \
        in tests.stdout, tests.stdout[-3000:]
    probe = "import jobfence.testing.sim.job; print(jobfence.testing.sim.job.__file__)"
    # the simulator came from the installed runtime wheel, and no operator tooling is there at all
    assert f"{site}/jobfence/testing/sim" in run([sys.executable, "-c", probe], EXAMPLE, env).stdout
    assert not (site / "ops").exists()

    # WHEN its app.py synthesizes as `cdk synth` runs it (cdk.json's context), the nag packs on
    context = {**json.loads((EXAMPLE / "cdk.json").read_text())["context"], "aws:cdk:bundling-stacks": []}
    out = tmp_path / "cdk.out"
    synth = run([sys.executable, "app.py"], EXAMPLE,
                {**env, "CDK_OUTDIR": str(out), "CDK_CONTEXT_JSON": json.dumps(context)})
    # THEN it succeeds with no open finding, the stack named by its own prefix
    assert synth.returncode == 0, synth.stderr[-3000:]
    template = json.loads((out / "invoices.template.json").read_text())
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert [f["Properties"]["FunctionName"] for f in functions] == ["invoices-mark_overdue_invoices"]
