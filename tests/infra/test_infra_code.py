"""The functions' code asset, as staged by synthesis: the runtime, handlers, jobs and real adapters, and no
code that only tests and local tools run (issue 29, low: `jobfence/testing` and the fake providers shipped)."""

from __future__ import annotations

import pathlib
import re

from jobfence_cdk.code import TEST_ONLY
from tests.infra.cfn import of_type

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"


def _staged_asset(synthesis) -> pathlib.Path:
    """The directory synthesis staged for the functions' code (one asset, shared by every function)."""
    keys = {f["Properties"]["Code"]["S3Key"] for f in of_type(synthesis.resources, "AWS::Lambda::Function").values()}
    (key,) = keys
    staged = pathlib.Path(synthesis.stack.node.root.outdir) / f"asset.{key.removesuffix('.zip')}"
    assert staged.is_dir(), staged
    return staged


def _files(root: pathlib.Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_the_function_asset_ships_no_test_kit_and_no_fake_provider(synthesized):
    staged = _staged_asset(synthesized)
    files = _files(staged)
    # GIVEN the checkout's functions/ holds the test kit and the fakes
    test_only = {f for f in _files(FUNCTIONS) if f.startswith("jobfence/testing/") or re.fullmatch(r"providers/\w+_fake\.py", f)}
    assert {"jobfence/testing/__init__.py", "providers/items_fake.py", "providers/payments_fake.py"} <= test_only
    assert TEST_ONLY == ["jobfence/testing", "providers/*_fake.py"]
    # THEN none of them is in the asset, while the runtime, the handlers and the real adapters are
    assert not files & test_only, sorted(files & test_only)
    assert not any(f.startswith("jobfence/testing") or f.endswith("_fake.py") for f in files)
    assert {"jobfence/scheduled.py", "handlers/scheduled.py", "providers/items.py", "providers/payments.py"} <= files
    assert "requirements.txt" not in files  # the layer's input, not code
    # AND everything else of functions/ is (nothing else excluded by accident)
    assert files == _files(FUNCTIONS) - test_only - {"requirements.txt"} - {f for f in _files(FUNCTIONS) if f.endswith(".pyc")}
    # AND no module of the asset imports them (the functions, on Lambda and on the local runtime, run the asset)
    importing = [f for f in files if f.endswith(".py")
                 and re.search(r"^\s*(from|import)\s+(jobfence\.testing|providers\.\w+_fake)\b",
                               (staged / f).read_text(), re.MULTILINE)]
    assert importing == []
