"""The import graph (issue 30): no arrow from the runtime (its test kit and fault simulator among it) or a
provider adapter to the operator tooling (`jobfence_ops`, this repository's `ops`), to an app (`jobs`,
`handlers`) or to the tests; and none from the operator tooling any app runs (`jobfence_ops`) to an app,
to a provider adapter or to this repository's own tooling (`ops`): it reaches an app only through the
spec it is given (`jobfence_ops.app`). And no cycle among the runtime's own modules (issue 32 item 2): a
module that needs another's type takes it from a module below both, never through a `TYPE_CHECKING` import
that only hides the loop from the interpreter.

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


def imports_of(path: pathlib.Path, names: bool = False) -> set[str]:
    """Every module `path` imports, wherever the statement is (absolute names).

    With `names`, `from m import x` also gives `m.x` (x may be a submodule: the caller keeps the modules).
    """
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
                source = ".".join([*base, node.module] if node.module else base)
            elif node.module:
                found.add(node.module)
                source = node.module
            if names and (node.level or node.module):
                found.update(f"{source}.{alias.name}" for alias in node.names)
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


def package_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of `package` it imports (module-level, under `TYPE_CHECKING` or lazy alike)."""
    paths = {module_name(p): p for p in sorted((FUNCTIONS / package).rglob("*.py")) if "__pycache__" not in p.parts}
    return {name: {m for m in imports_of(path, names=True) if m in paths and m != name} for name, path in paths.items()}


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each group of modules that import one another round a loop (a strongly connected component), sorted."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for other in sorted(graph[module]):
            if other not in order:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], order[other])
        if low[module] == order[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return sorted(cycles)


def test_the_runtime_has_no_import_cycle():
    # GIVEN every module of the runtime WHEN its imports are read (a TYPE_CHECKING one counts)
    graph = package_graph("jobfence")
    # THEN no module reaches itself: each group printed with its arrows
    found = {
        " ".join(group): sorted(f"{a} -> {b}" for a in group for b in graph[a] & set(group))
        for group in import_cycles(graph)
    }
    assert found == {}


def test_the_cycle_check_sees_an_arrow_hidden_under_type_checking(tmp_path, monkeypatch):
    # GIVEN a package whose store imports its helper, which imports the store back only for a type (the
    # shape work/store.py and work/transactions.py had), and a second pair looping through a lazy import
    package = tmp_path / "jobfence"
    (package / "work").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "work" / "__init__.py").write_text("")
    (package / "work" / "store.py").write_text("from jobfence.work.transactions import claim\n")
    (package / "work" / "transactions.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jobfence.work.store import WorkStore\n"
    )
    (package / "a.py").write_text("from jobfence import b\n")
    (package / "b.py").write_text("def later():\n    from . import a\n")
    (package / "leaf.py").write_text("import jobfence.a\n")
    monkeypatch.setattr(sys.modules[__name__], "FUNCTIONS", tmp_path)
    # WHEN its graph is read THEN both loops are found, and the module that only imports one is in neither
    assert import_cycles(package_graph("jobfence")) == [
        ["jobfence.a", "jobfence.b"],
        ["jobfence.work.store", "jobfence.work.transactions"],
    ]
