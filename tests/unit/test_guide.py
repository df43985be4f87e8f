"""The guides run: docs/your-first-job.md and docs/your-first-pipeline.md, block by block, from the page alone.

The convention (stated at the top of each page):
    ```LANG              a block whose first line is `# file: PATH`, or whose info string says `file=PATH`,
    # file: PATH         is written to PATH in an empty app directory
    ```python            any other Python block runs, in page order, in one namespace, from the app's directory
    ```sh                shown, never run: every `jobfence ...` line must parse with the operator CLI's parser,
                         next to the files the block's `cat > FILE <<'EOF'` heredocs write
    ```text              a picture (a directory tree)
Then the test files the page wrote run with pytest in that directory. Both run in fresh interpreters that see
only the packages an app installs (`jobfence`, `jobfence_cdk`, and `ops` for the simulator), so the page's
modules (`app`, `handlers`, its packages) never meet this repository's own; nothing puts the app's `functions/`
on the path but the page itself (as an outsider's shell would not), and no AWS region is in the environment
(the suite's conftest sets one, an outsider's shell may not): what needs one gets it from the page.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass

import pytest

from jobfence_ops.cli import _normalize as normalized
from jobfence_ops.cli import parser

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = ("your-first-job.md", "your-first-pipeline.md")
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
FILE_LINE = re.compile(r"^# file: (\S+)\n")
HEREDOC = re.compile(r"^cat > (\S+) <<'EOF'$")
# what the suite's conftest sets and an outsider's shell may lack: the pages run without them
AMBIENT = ("AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "PYTHONPATH")
RUN_BLOCKS = """
import json, pathlib, sys
blocks = json.loads(pathlib.Path(sys.argv[1]).read_text())
namespace = {"__name__": "__guide__"}
for n, (where, code) in enumerate(blocks):
    exec(compile(code, where, "exec"), namespace)
print(f"ran {len(blocks)} blocks")
"""


@dataclass(frozen=True)
class Block:
    language: str
    path: str | None  # where a file block goes
    code: str
    line: int  # of the opening fence, for messages


def blocks(page: str) -> list[Block]:
    text = (ROOT / "docs" / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        language, info, code = match.group(1), match.group(2), match.group(3)
        named = FILE_LINE.match(code) or re.search(r"\bfile=(\S+)", info)
        found.append(Block(language, named.group(1) if named else None, code, text[: match.start()].count("\n") + 1))
    return found


def site(where: pathlib.Path) -> pathlib.Path:
    """The packages an app has installed, and nothing else of this repository (not its `jobs` or `handlers`):
    the runtime and the constructs (linked), and the simulator's tooling (copied: linked, `ops` would put
    this repository's functions on the path)."""
    where.mkdir()
    (where / "jobfence").symlink_to(ROOT / "functions" / "jobfence")
    (where / "jobfence_cdk").symlink_to(ROOT / "infra" / "jobfence_cdk")
    shutil.copytree(ROOT / "ops", where / "ops", ignore=shutil.ignore_patterns("__pycache__"))
    return where


def run(args: list[str], cwd: pathlib.Path, packages: pathlib.Path) -> str:
    outsider = {name: value for name, value in os.environ.items() if name not in AMBIENT}
    env = {**outsider, "PYTHONPATH": str(packages), "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
           "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{args[1:3]}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_a_file_a_run_a_command_or_a_picture(page):
    for block in blocks(page):
        assert block.language in ("python", "toml", "json", "sh", "text"), f"{page}:{block.line}: ```{block.language}"
        if block.language in ("toml", "json"):
            assert block.path, f"{page}:{block.line}: a {block.language} block must say which file it is"


@pytest.mark.parametrize("page", PAGES)
def test_every_jobfence_command_shown_parses(page, tmp_path, monkeypatch):
    """Each `jobfence` line parses as the CLI parses it, in a directory holding the files the block's
    `cat > FILE <<'EOF'` lines write (so a file argument is read and checked, as the CLI would)."""
    monkeypatch.chdir(tmp_path)
    commands = []
    for block in (b for b in blocks(page) if b.language == "sh"):
        lines = iter(block.code.splitlines())
        for line in lines:
            heredoc = HEREDOC.match(line)
            if heredoc:
                body = []
                for inner in lines:
                    if inner == "EOF":
                        break
                    body.append(inner)
                (tmp_path / heredoc.group(1)).write_text("\n".join(body) + "\n")
            elif line.startswith("jobfence "):
                commands.append(line)
    assert commands, f"{page} shows no jobfence command"
    for line in commands:
        try:
            parser().parse_args(normalized(shlex.split(line)[1:]))
        except SystemExit as exc:
            pytest.fail(f"{page}: `{line}` does not parse (exit {exc.code})")


# the packages whose `__init__` declares the public API docs/api.md lists (`ops.apidoc`)
PUBLIC_PACKAGES = ("jobfence", "jobfence.testing", "jobfence_cdk")


@pytest.mark.parametrize("page", PAGES)
def test_every_jobfence_name_the_page_imports_is_public_and_on_the_api_page(page):
    """An outsider imports only what docs/api.md promises: from a package's `__init__`, never an internal module."""
    api = (ROOT / "docs" / "api.md").read_text()
    internal, unlisted = [], []
    for block in (b for b in blocks(page) if b.language == "python"):
        for node in ast.walk(ast.parse(block.code)):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(("jobfence", "jobfence_cdk")):
                continue
            if node.module not in PUBLIC_PACKAGES:
                internal.append(f"{page}:{block.line}: from {node.module} import ...")
                continue
            unlisted += [f"{node.module}.{a.name}" for a in node.names if f"#### `{node.module}.{a.name}`" not in api]
    assert internal == [] and unlisted == [], (internal, unlisted)


@pytest.mark.slow  # the first page synthesizes its CDK app; both run a few seeds of the fault simulator
@pytest.mark.parametrize("page", PAGES)
def test_the_page_builds_an_app_whose_blocks_and_tests_run(page, tmp_path):
    app = tmp_path / "app"
    app.mkdir()
    runs, tests = [], []
    for block in blocks(page):
        if block.path:
            target = app / block.path
            assert app in target.resolve().parents, f"{page}:{block.line}: {block.path} is outside the app"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block.code)
            if block.path.startswith("tests/test_"):
                tests.append(block.path)
        elif block.language == "python":
            runs.append((f"{page}:{block.line}", block.code))
    assert runs and tests, f"{page} has no block to run or no test"
    script = tmp_path / "blocks.json"
    script.write_text(json.dumps(runs))
    packages = site(tmp_path / "site")
    assert run([sys.executable, "-c", RUN_BLOCKS, str(script)], app, packages).strip().endswith(f"ran {len(runs)} blocks")
    out = run([sys.executable, "-m", "pytest", *tests], app, packages)
    assert re.search(r"\d+ passed", out) and "failed" not in out and "skipped" not in out, out[-2000:]
