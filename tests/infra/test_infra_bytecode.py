"""The code asset ships compiled bytecode for Lambda's Python (issue 33 item 3): `jobfence_cdk.code.stage_asset`
with a `jobfence_cdk.bytecode.Compiler`.

The build step's logic is checked with this machine's interpreter on a temporary tree (its bytecode is the one
this interpreter can load back); Python 3.14's own, the runtime's, with Pyodide, which the build finds in the
repository's `node_modules` (`npm ci` installs it from package.json).
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import pathlib
import subprocess
import sys

import pytest

from jobfence_cdk.bytecode import MAGIC, BytecodeError, Compiler, find_compiler, pyc_header
from jobfence_cdk.code import RUNTIME, code_asset_hash, python_version, stage_asset

ROOT = pathlib.Path(__file__).resolve().parents[2]
THIS_PYTHON = Compiler(f"{sys.version_info[0]}.{sys.version_info[1]}", "interpreter", sys.executable)
UNCHECKED_HASH = 0b01  # PEP 552 flags: hash-based, not checked against the source


def _tree(root: pathlib.Path) -> pathlib.Path:
    """A small functions directory: a package, a test-only kit, a stale bytecode file and the requirements."""
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "mod.py").write_text("VALUE = 'compiled'\n")
    (root / "jobfence" / "testing").mkdir(parents=True)
    (root / "jobfence" / "testing" / "kit.py").write_text("KIT = 1\n")
    (root / "pkg" / "__pycache__").mkdir()
    (root / "pkg" / "__pycache__" / "stale.cpython-311.pyc").write_bytes(b"stale")
    (root / "requirements.txt").write_text("pynamodb\n")
    return root


def test_the_asset_build_compiles_every_module_to_an_unchecked_hash_pyc_for_the_task_root(tmp_path):
    # GIVEN a functions directory, and an interpreter of the Python the runtime runs (here this machine's)
    source = _tree(tmp_path / "functions")
    out = tmp_path / "asset"
    # WHEN the asset is staged with it
    assert stage_asset(source, out, THIS_PYTHON) is True
    # THEN every module the asset holds has its .pyc beside it, this interpreter's magic, hash-based and unchecked
    tag = sys.implementation.cache_tag
    pycs = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.pyc"))
    assert pycs == [f"pkg/__pycache__/__init__.{tag}.pyc", f"pkg/__pycache__/mod.{tag}.pyc"]
    assert pyc_header(out / pycs[1]) == (importlib.util.MAGIC_NUMBER, UNCHECKED_HASH)
    # AND it names the module where Lambda unpacks it, not where it was built
    assert marshal.loads((out / pycs[1]).read_bytes()[16:]).co_filename == "/var/task/pkg/mod.py"
    # AND the test kit, the checkout's stale bytecode and the requirements are not in the asset
    assert not (out / "jobfence").exists() and not (out / "requirements.txt").exists()
    # AND the interpreter loads the bytecode without checking the source: a source edited since still
    # imports as compiled (what lets a read-only /var/task, whose zip's mtimes mean nothing, use it)
    (out / "pkg" / "mod.py").write_text("VALUE = 'source'\n")
    loaded = subprocess.run([sys.executable, "-c", "import pkg.mod; print(pkg.mod.VALUE)"], cwd=out,
                            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(out)},
                            capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "compiled"


def test_without_a_compiler_the_asset_ships_its_sources_and_hashes_differently(tmp_path):
    source = _tree(tmp_path / "functions")
    assert stage_asset(source, tmp_path / "asset") is False
    assert list((tmp_path / "asset").rglob("*.pyc")) == []
    # a bundle built without bytecode is never reused for one with it, nor the other way round
    assert code_asset_hash(source, None) != code_asset_hash(source, Compiler("3.14", "pyodide", "x"))
    assert code_asset_hash(source, None) == code_asset_hash(source, None)


def test_an_interpreter_that_is_not_the_runtimes_python_is_refused(tmp_path):
    # GIVEN this machine's interpreter taken for Python 3.14 (a python3.14 on the PATH that is another)
    impostor = Compiler("3.14", "interpreter", sys.executable)
    # THEN it writes nothing the runtime would reject silently: the build fails, naming both versions
    with pytest.raises(BytecodeError, match=r"is Python 3\.\d+ .* not 3\.14"):
        impostor.compile(_tree(tmp_path / "functions"), "/var/task")


def test_a_module_that_does_not_compile_fails_the_build(tmp_path):
    source = _tree(tmp_path / "functions")
    (source / "pkg" / "broken.py").write_text("def (:\n")
    with pytest.raises(BytecodeError, match="does not compile"):
        stage_asset(source, tmp_path / "asset", THIS_PYTHON)


def test_with_neither_python3_14_nor_pyodide_there_is_no_compiler(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no python3.14, no node
    assert find_compiler("3.14", [tmp_path]) is None


@pytest.mark.slow  # node starts Pyodide (CPython in WebAssembly): seconds
def test_the_build_compiles_for_the_runtimes_python_3_14(tmp_path):
    # GIVEN the runtime's Python version and the build's compiler for it (Pyodide from node_modules, here)
    python = python_version(RUNTIME)
    compiler = find_compiler(python, [ROOT / "functions"])
    assert python == "3.14" and compiler is not None, "npm ci installs pyodide (package.json)"
    # WHEN the asset is staged with it
    out = tmp_path / "asset"
    assert stage_asset(_tree(tmp_path / "functions"), out, compiler) is True
    # THEN its bytecode is 3.14's: the magic number of every 3.14.x, hash-based and unchecked
    pyc = out / "pkg" / "__pycache__" / "mod.cpython-314.pyc"
    assert pyc_header(pyc) == (MAGIC["3.14"], UNCHECKED_HASH)
    assert {p.name for p in out.rglob("*.pyc")} == {"__init__.cpython-314.pyc", "mod.cpython-314.pyc"}
