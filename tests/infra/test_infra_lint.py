"""cfn-lint on the synthesized template (the same check `make synth` runs on cdk.out)."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_cfn_lint_passes_on_the_synthesized_template(each, tmp_path):
    # GIVEN the synthesized template on disk
    path = tmp_path / "jobfence.template.json"
    path.write_text(json.dumps(each.template.to_json()))
    # WHEN cfn-lint runs with the repository's settings
    result = subprocess.run([str(pathlib.Path(sys.executable).with_name("cfn-lint")), str(path)], cwd=ROOT, capture_output=True, text=True)
    # THEN it reports nothing
    assert result.returncode == 0, result.stdout + result.stderr
