"""Every third-party module the Lambda code imports is in the layer: functions/requirements.txt lists its
distribution, or a listed distribution depends on it.

The tests run in the development venv, which has everything; a function in Lambda has only its code
asset and the layer built from functions/requirements.txt, so a module missing there fails only
after deployment, at the cold start. The test kit (`jobfence.testing`) is not Lambda code: its
dependencies are the `jobfence[testing]` extra.
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


def test_every_module_the_functions_import_is_in_the_layer():
    distributions = metadata.packages_distributions()
    layer = in_the_layer()
    missing = {module: sorted(files) for module, files in imported_top_level_modules().items()
               if not {canonical(d) for d in distributions.get(module, [module])} & layer}
    assert not missing, f"imported by the Lambda code, absent from functions/requirements.txt: {missing}"
