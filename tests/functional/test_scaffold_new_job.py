"""`jobfence new job` end to end, as a new user would run it: in a copy of this repository's tracked files, the scaffold,
then the generated test, then the app synthesized as `make synth` does it (cdk-nag packs on, cfn-lint on the
template; the dependency layer is not built).

Slow (a synthesis): one test.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SYNTH = """
import json, pathlib, sys
sys.path[:0] = ["functions", "infra", "."]
from aws_cdk import App
from app import OPTIONS
from jobfence_cdk import SKIP_BUNDLING_CONTEXT, build_app
from jobfence_cdk.app import STACK_NAME
from jobs.catalog import CATALOG
out = pathlib.Path("cdk.out")
app = App(context={**SKIP_BUNDLING_CONTEXT, "nag": "true"}, outdir=str(out))
build_app(app, CATALOG, **OPTIONS)
app.synth()
print(out / f"{STACK_NAME}.template.json")
"""


def run(args: list[str], cwd: pathlib.Path, timeout: int = 900) -> subprocess.CompletedProcess:
    # the copy's own tooling, runtime and constructs (as in its checkout), whatever the venv has installed
    checkout = os.pathsep.join(str(p) for p in (cwd, cwd / "functions", cwd / "infra"))
    env = {**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": checkout}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args[:4])} ...: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_a_scaffolded_job_passes_its_own_test_and_synthesizes_with_its_function_rule_and_alarms(tmp_path):
    app = tmp_path / "app"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True)
    for name in filter(None, tracked.stdout.split("\0")):  # what a fresh clone holds (as this tree has it)
        if (ROOT / name).is_file():
            (app / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, app / name)
    # GIVEN a fresh copy of the app WHEN a new user scaffolds a job in a new subsystem
    out = run([sys.executable, "-m", "jobfence_ops", "new", "job", "nightly_digest", "--subsystem", "reports",
               "--schedule", "rate(1 day)"], app)
    assert "functions/jobs/reports/nightly_digest.py" in out.stdout
    # THEN its generated test passes unchanged (a tick on moto, and ten seeds of the fault simulator)
    tested = run([sys.executable, "-m", "pytest", "tests/unit/test_job_nightly_digest.py", "-p", "no:cacheprovider"], app)
    assert "2 passed" in tested.stdout
    # AND the app synthesizes (nag packs on) with the job's function, its rule, its table and its alarms
    path = run([sys.executable, "-c", SYNTH], app).stdout.strip().splitlines()[-1]
    run([str(pathlib.Path(sys.executable).parent / "cfn-lint"), path], app)  # as `make synth` checks it
    resources = json.loads((app / path).read_text())["Resources"]

    def of_type(kind: str) -> list[dict]:
        return [r["Properties"] for r in resources.values() if r["Type"] == kind]

    [function] = [f for f in of_type("AWS::Lambda::Function")
                  if f.get("Environment", {}).get("Variables", {}).get("JOB_NAME") == "nightly_digest"]
    assert "TABLE_NIGHTLY_DIGEST_ROWS" in function["Environment"]["Variables"]
    assert [r for r in of_type("AWS::Events::Rule") if r.get("ScheduleExpression") == "rate(1 day)"
            and "nightly_digest" in json.dumps(r)]
    assert [t for t in of_type("AWS::DynamoDB::Table") if "nightly_digest_rows" in json.dumps(t.get("TableName", ""))]
    alarms = [a["AlarmName"] for a in of_type("AWS::CloudWatch::Alarm") if "nightly_digest" in json.dumps(a.get("AlarmName"))]
    assert any(str(name).endswith("nightly_digest-failed") for name in alarms), alarms
