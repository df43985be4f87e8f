"""The import graph (issue 30): no arrow from the runtime (its test kit and fault simulator among it) or a
provider adapter to the operator tooling (`jobfence_ops`, this repository's `ops`), to an app (`jobs`,
`handlers`) or to the tests; and none from the operator tooling any app runs (`jobfence_ops`) to an app,
to a provider adapter or to this repository's own tooling (`ops`): it reaches an app only through the
spec it is given (`jobfence_ops.app`).

Read statically (ast), so an import inside a function (a lazy one) counts as much as a module-level one,
and so does `importlib.import_module("...")` / `__import__("...")` with a literal name; a relative import
is resolved against its module's package.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import pytest

FUNCTIONS = pathlib.Path(__file__).resolve().parents[2] / "functions"
APP_AND_TOOLING = {"jobfence_ops", "ops", "jobs", "handlers", "tests"}
# package -> the top-level packages none of its modules may import
FORBIDDEN = {
    "jobfence": APP_AND_TOOLING | {"providers"},
    "providers": APP_AND_TOOLING,
    "jobfence_ops": {"ops", "jobs", "handlers", "providers", "tests"},
}
OPERATOR_TOOLING = "jobfence_ops"  # at the repository's root; the others are in functions/


def module_name(path: pathlib.Path) -> str:
    base = FUNCTIONS if path.is_relative_to(FUNCTIONS) else FUNCTIONS.parent
    parts = list(path.relative_to(base).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: pathlib.Path) -> set[str]:
    """Every module `path` imports, wherever the statement is (absolute names)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                if node.module:
                    found.add(".".join([*base, node.module]))
                else:  # `from . import name`: name may be a submodule
                    found.update(".".join([*base, alias.name]) for alias in node.names)
            elif node.module:
                found.add(node.module)
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                found.add(node.args[0].value)
    return found


def forbidden_imports(package: str) -> dict[str, list[str]]:
    """module path -> the forbidden modules it imports, for every module of `package`."""
    out = {}
    base = FUNCTIONS.parent if package == OPERATOR_TOOLING else FUNCTIONS
    for path in sorted((base / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        bad = sorted(m for m in imports_of(path) if m.split(".")[0] in FORBIDDEN[package])
        if bad:
            out[path.relative_to(base).as_posix()] = bad
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_the_runtime_the_providers_and_the_operator_tooling_import_nothing_they_must_not(package):
    # GIVEN every module of the package (its test kit and simulator too) WHEN its imports are read
    # THEN none names what is forbidden to it (above)
    assert forbidden_imports(package) == {}


def test_the_simulator_the_kit_runs_is_walked_too():
    # the kit's simulator is part of the runtime's graph (not a module the walk could miss)
    walked = {module_name(p) for p in (FUNCTIONS / "jobfence").rglob("*.py")}
    assert {"jobfence.testing.sim.world", "jobfence.testing.sim.wire", "jobfence.testing.faults"} <= walked


def test_the_walk_sees_lazy_relative_and_dynamic_imports(tmp_path, monkeypatch):
    # GIVEN a module that reaches the tooling three ways none of which runs at import time
    package = tmp_path / "providers"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "sneaky.py").write_text(
        "import importlib\n"
        "def later():\n"
        "    from ops.sim import campaign\n"
        "    from . import helpers\n"
        "    return importlib.import_module('jobs.catalog'), __import__('handlers.scheduled')\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "FUNCTIONS", tmp_path)
    # WHEN it is walked THEN each arrow is found (the relative one resolves inside the package: allowed)
    assert forbidden_imports("providers") == {"providers/sneaky.py": ["handlers.scheduled", "jobs.catalog", "ops.sim"]}
    assert "providers.helpers" in imports_of(package / "sneaky.py")
