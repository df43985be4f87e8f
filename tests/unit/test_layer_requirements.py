"""Every third-party module the Lambda code imports is in the layer: functions/requirements.txt lists its
distribution, or a listed distribution depends on it; or Lambda's runtime provides it (the AWS SDK,
`RUNTIME_PROVIDED`), which the layer then never holds.

The tests run in the development venv, which has everything; a function in Lambda has only its code
asset, the layer built from functions/requirements.txt and its runtime's own SDK, so a module missing
there fails only after deployment, at the cold start. The test kit (`jobfence.testing`) is not Lambda
code: its dependencies are the `jobfence[testing]` extra, and the layer drops it (`prune_layer`).
"""

from __future__ import annotations

import ast
import importlib.metadata as metadata
import pathlib
import re
import sys

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"
NOT_LAMBDA_CODE = (FUNCTIONS / "jobfence" / "testing",)


def imported_top_level_modules() -> dict[str, set[str]]:
    """Third-party top-level module -> the files of the code asset that import it."""
    local = {p.stem for p in FUNCTIONS.iterdir()}
    found: dict[str, set[str]] = {}
    for path in FUNCTIONS.rglob("*.py"):
        if any(path.is_relative_to(skip) for skip in NOT_LAMBDA_CODE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else []
            for name in names:
                top = name.split(".")[0]
                if top not in local and top not in sys.stdlib_module_names:
                    found.setdefault(top, set()).add(str(path.relative_to(FUNCTIONS)))
    return found


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def in_the_layer() -> set[str]:
    """The listed distributions and, transitively, what they require (extras asked for included)."""
    wanted = []
    for line in (FUNCTIONS / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and not line.startswith("-"):
            match = re.match(r"([A-Za-z0-9_.-]+)(\[([^\]]*)\])?", line)
            wanted.append((match.group(1), {e.strip() for e in (match.group(3) or "").split(",") if e.strip()}))
    seen: set[str] = set()
    while wanted:
        name, extras = wanted.pop()
        if canonical(name) in seen:
            continue
        seen.add(canonical(name))
        for requirement in metadata.requires(name) or []:
            req_name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0)
            marker = requirement.partition(";")[2]
            extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)", marker)
            if extra is None or extra.group(1) in extras:
                wanted.append((req_name, set()))
    return seen


def test_every_module_the_functions_import_is_in_the_layer_or_lambdas_runtime():
    from jobfence_cdk.code import RUNTIME_PROVIDED

    distributions = metadata.packages_distributions()
    layer = in_the_layer() | {canonical(name) for name in RUNTIME_PROVIDED}
    missing = {module: sorted(files) for module, files in imported_top_level_modules().items()
               if not {canonical(d) for d in distributions.get(module, [module])} & layer}
    assert not missing, f"imported by the Lambda code, absent from functions/requirements.txt: {missing}"
    # the functions do import the SDK the runtime provides (so the allowance above is used, not a blanket one)
    assert {"boto3", "botocore"} <= set(imported_top_level_modules())


def test_the_layers_requirements_pin_nothing_lambdas_runtime_provides():
    from jobfence_cdk.code import RUNTIME_PROVIDED

    # GIVEN the layer's requirements WHEN their names are read THEN the SDK Lambda ships is not among them
    listed = {canonical(re.match(r"[A-Za-z0-9_.-]+", line).group(0))
              for line in (FUNCTIONS / "requirements.txt").read_text().splitlines()
              if line.split("#")[0].strip() and not line.startswith("-")}
    assert listed and not listed & {canonical(name) for name in RUNTIME_PROVIDED}, sorted(listed)
    # AND the runtime wheel requires it only through its `boto3` extra (tests/unit/test_packages.py reads the wheel)


def _installed(target: pathlib.Path, name: str, files: dict[str, str]) -> None:
    """An installed distribution as pip --target leaves it: its files and a dist-info whose RECORD lists them."""
    info = f"{name}-1.0.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"}
    for path, text in files.items():
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        (target / path).write_text(text)
    record = [f"{path},," for path in files] + [f"{info}/RECORD,,", "../../bin/outside,,"]
    (target / info / "RECORD").write_text("\n".join(record) + "\n")


def test_the_layer_is_pruned_of_the_sdk_and_the_test_kit(tmp_path):
    from jobfence_cdk.code import prune_layer

    # GIVEN a layer as pip installs it: the SDK (botocore pulled in by pynamodb), pynamodb, and the runtime wheel
    target = tmp_path / "python"
    _installed(target, "boto3", {"boto3/__init__.py": "", "boto3/session.py": ""})
    _installed(target, "botocore", {"botocore/__init__.py": "", "botocore/data/dynamodb/service-2.json.gz": "x"})
    _installed(target, "s3transfer", {"s3transfer/__init__.py": ""})
    _installed(target, "jmespath", {"jmespath/__init__.py": ""})
    _installed(target, "pynamodb", {"pynamodb/__init__.py": "", "pynamodb/models.py": ""})
    _installed(target, "jobfence", {"jobfence/__init__.py": "", "jobfence/lease.py": "",
                                    "jobfence/testing/__init__.py": "", "jobfence/testing/sim/kernel.py": ""})
    outside = tmp_path / "bin" / "outside"  # a RECORD line outside the layer is never followed
    outside.parent.mkdir()
    outside.write_text("")
    # WHEN it is pruned
    removed = prune_layer(target)
    # THEN the SDK and the test kit are gone, every other file is there, and nothing outside was touched
    assert removed == ["boto3", "botocore", "jmespath", "s3transfer", "jobfence/testing"]
    left = {p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file()}
    assert left == {"pynamodb/__init__.py", "pynamodb/models.py", "pynamodb-1.0.dist-info/METADATA",
                    "pynamodb-1.0.dist-info/RECORD", "jobfence/__init__.py", "jobfence/lease.py",
                    "jobfence-1.0.dist-info/METADATA", "jobfence-1.0.dist-info/RECORD"}
    assert not (target / "botocore").exists() and outside.exists()
