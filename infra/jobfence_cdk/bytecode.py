"""Compiled bytecode for the code asset and the layer: what Lambda's Python otherwise compiles at every cold start.

Lambda's task root (/var/task) and layers (/opt) are read-only, so a module shipped without its `.pyc` is
compiled again by every cold start (25-35 ms for a function's own code: docs/benchmarks.md, "Cold start"). The
build writes unchecked-hash pycs (PEP 552, `PycInvalidationMode.UNCHECKED_HASH`): the import system loads them
without looking at the source's mtime (a zip's mtimes mean nothing) or hashing the source, and the asset is the
same bytes for the same sources. Each `.pyc` records the filename the function sees (`/var/task/...`,
`/opt/python/...`).

A `.pyc` carries its interpreter's magic number, so only Lambda's own Python version can write it
(`find_compiler`), in this order:

- `python3.N` on the PATH (a CDK bundling image, a developer's machine that has it);
- else Pyodide's CPython of that version (WebAssembly, run by node: the npm package `pyodide`, pinned in the
  app's package.json, found in a `node_modules` beside the functions directory or above it). Bytecode is the
  same on every platform: only the version matters, and the interpreter reports both it and its magic number,
  which `Compiler.compile` checks;
- else none: the asset ships its sources, as before, and `FunctionCode` says so on synthesis.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

# importlib.util.MAGIC_NUMBER of each Lambda runtime's Python (3.14's is 3627, the same for every 3.14.x)
MAGIC = {"3.14": bytes.fromhex("2b0e0d0a")}

# Runs inside the compiling interpreter: compile `tree` for `ddir`, then report its version, magic number and success.
_COMPILE = """
import compileall, importlib.util, py_compile, sys
ok = compileall.compile_dir({tree!r}, ddir={ddir!r}, quiet=1, workers=1,
                            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
result = "%d.%d %s %d" % (sys.version_info[0], sys.version_info[1], importlib.util.MAGIC_NUMBER.hex(), ok)
"""

# node: load Pyodide from its package directory, mount the tree at /tree, run the program, print its `result`.
_PYODIDE = """
import { pathToFileURL } from "node:url";
const [dir, tree, code] = process.argv.slice(1);
const { loadPyodide } = await import(pathToFileURL(dir + "/pyodide.mjs").href);
const py = await loadPyodide({ indexURL: dir + "/" });
py.FS.mkdirTree("/tree");
py.FS.mount(py.FS.filesystems.NODEFS, { root: tree }, "/tree");
console.log(py.runPython(code));
"""


class BytecodeError(RuntimeError):
    """The compiler failed, or is not the Python it was taken for."""


@dataclass(frozen=True)
class Compiler:
    """An interpreter of Python `python` ("3.14") that compiles a tree: a `python3.N` executable (`interpreter`)
    or Pyodide's package directory run by node (`pyodide`)."""

    python: str
    kind: str  # "interpreter" | "pyodide"
    path: str

    def compile(self, tree: pathlib.Path, ddir: str) -> None:
        """Write an unchecked-hash `.pyc` beside every module under `tree`, recording `ddir` as its directory.

        Raises `BytecodeError` when a module does not compile or the interpreter is not Python `python`
        with its magic number (`MAGIC`).
        """
        tree = pathlib.Path(tree).resolve()
        if self.kind == "pyodide":
            program = _COMPILE.format(tree="/tree", ddir=ddir) + "result\n"
            command = ["node", "--input-type=module", "-e", _PYODIDE, self.path, str(tree), program]
        else:
            command = [self.path, "-c", _COMPILE.format(tree=str(tree), ddir=ddir) + "print(result)\n"]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        fields = (done.stdout.strip().splitlines() or [""])[-1].split()
        if done.returncode != 0 or len(fields) != 3:
            raise BytecodeError(f"{self.kind} {self.path} could not compile {tree}: {done.stderr.strip()[-500:]}")
        version, magic, ok = fields
        expected = MAGIC.get(self.python)
        if version != self.python or (expected is not None and bytes.fromhex(magic) != expected):
            raise BytecodeError(f"{self.kind} {self.path} is Python {version} (magic {magic}), not {self.python}")
        if ok != "1":
            raise BytecodeError(f"a module under {tree} does not compile with Python {self.python}")


def find_compiler(python: str, search: Iterable[pathlib.Path]) -> Compiler | None:
    """A compiler for Python `python`: `python3.N` on the PATH, else Pyodide of that version in a `node_modules`
    of a directory of `search` or above one (with node on the PATH), else None."""
    executable = shutil.which(f"python{python}")
    if executable is not None:
        return Compiler(python, "interpreter", executable)
    if shutil.which("node") is None:
        return None
    pyodide_major = python.replace(".", "")  # Pyodide's versions follow Python's: 314.x.y is Python 3.14
    for start in search:
        for directory in (pathlib.Path(start).resolve(), *pathlib.Path(start).resolve().parents):
            package = directory / "node_modules" / "pyodide"
            try:
                version = json.loads((package / "package.json").read_text())["version"]
            except (OSError, ValueError, KeyError):
                continue
            if str(version).split(".")[0] == pyodide_major and (package / "pyodide.mjs").is_file():
                return Compiler(python, "pyodide", str(package))
    return None


def pyc_header(path: pathlib.Path) -> tuple[bytes, int]:
    """A `.pyc`'s magic number and flags (1: hash-based, unchecked; 3: checked; 0: timestamp-based)."""
    head = pathlib.Path(path).read_bytes()[:8]
    return head[:4], int.from_bytes(head[4:8], "little")


def copy_tree(source: pathlib.Path, out: pathlib.Path, files: Iterable[str]) -> None:
    """Copy the `files` (paths relative to `source`, with "/") into `out`."""
    for relative in files:
        target = pathlib.Path(out) / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(pathlib.Path(source) / relative, target)
