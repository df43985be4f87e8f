"""The guides run: docs/your-first-job.md and docs/your-first-pipeline.md, as an outsider follows them.

The convention (stated at the top of each page):
    ```LANG              a block whose first line is `# file: PATH`, or whose info string says `file=PATH`,
    # file: PATH         is written to PATH of the app directory
    ```sh run            typed in the app directory, in one shell session (the venv, the wheels, pytest, the CDK
                         CLI, `npx cdk synth`)
    ```python            any other Python block runs with that session's `python`, from the app's directory (a
                         run of blocks with no file or `run` block between them in one interpreter)
    ```sh                shown, never run (it needs the jobfence repository or an AWS account): every
                         `jobfence ...` line must parse with the operator CLI's parser, next to the files the
                         block's `cat > FILE <<'EOF'` heredocs write
    ```text              a picture (a directory tree)
The fast checks read the page; the slow one follows it: the page becomes one bash script, run in a new directory
holding only the three wheels this repository builds, with an environment stripped of what an outsider's shell
would not have (an AWS region or profile, a virtual environment, PYTHONPATH, the JSII banner's silencer, this
repository's tools on PATH). Its pip and npm reach the package registries (their caches keep it fast); its synth
builds the layer (bundling on), so a missing step or a wheel pip cannot find fails here.
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

import pytest

from jobfence_ops.cli import _normalize as normalized
from jobfence_ops.cli import parser
from tests.wheels import build_wheels

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = ("your-first-job.md", "your-first-pipeline.md")
FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```\s*$", re.M | re.S)
FILE_LINE = re.compile(r"^# file: (\S+)\n")
HEREDOC = re.compile(r"^cat > (\S+) <<'EOF'$")
# what the suite's environment has and an outsider's shell may lack: the pages run without them
AMBIENT = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
AMBIENT_PREFIXES = ("AWS_", "PYTEST_", "JOBFENCE_", "JSII_")
# the three distributions `make dist` builds: the runtime, the constructs, the operator tooling
PROJECTS = (ROOT / "packages" / "jobfence", ROOT / "packages" / "jobfence-cdk", ROOT)
EOF = "JOBFENCE_PAGE_EOF"  # the heredoc delimiter a file block is written with (never a line of a page)
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
    run: bool = False  # a shell block the outsider's session types (```sh run)


def blocks(page: str) -> list[Block]:
    text = (ROOT / "docs" / page).read_text()
    found = []
    for match in FENCE.finditer(text):
        language, info, code = match.group(1), match.group(2), match.group(3)
        named = FILE_LINE.match(code) or re.search(r"\bfile=(\S+)", info)
        line = text[: match.start()].count("\n") + 1
        found.append(Block(language, named.group(1) if named else None, code, line, "run" in info.split()))
    return found


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_a_file_a_run_a_command_or_a_picture(page):
    for block in blocks(page):
        assert block.language in ("python", "toml", "json", "sh", "text"), f"{page}:{block.line}: ```{block.language}"
        assert not block.run or (block.language == "sh" and not block.path), f"{page}:{block.line}: only sh blocks run"
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


@pytest.mark.parametrize("page", PAGES)
def test_the_cdk_cli_a_page_installs_is_the_one_this_repository_pins(page):
    """The page installs the CDK CLI this repository is tested with (package.json), and synthesizes with it."""
    pinned = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    typed = "".join(block.code for block in blocks(page) if block.run)
    assert re.findall(r"^npm install --save-exact aws-cdk@(\S+)$", typed, re.M) == [pinned], typed
    assert re.search(r"^npx cdk synth$", typed, re.M), f"{page}: no `npx cdk synth` is typed"


def transcript(page: str, scratch: pathlib.Path) -> str:
    """The page as one bash script: its files written, its `run` blocks typed, its Python blocks run, in page order;
    each step echoes `== PAGE:LINE KIND <epoch seconds>` first (where a failure is, and how long each took)."""
    lines, group = ["set -eo pipefail"], []

    def step(block: Block, kind: str) -> None:
        lines.append(f'echo "== {page}:{block.line} {kind} $(date +%s.%N)"')

    def python() -> None:
        if group:
            code = scratch / f"python-{group[0].line}.json"
            code.write_text(json.dumps([(f"{page}:{block.line}", block.code) for block in group]))
            step(group[0], "python")
            lines.append(f"python -c {shlex.quote(RUN_BLOCKS)} {shlex.quote(str(code))}")
            group.clear()

    for block in blocks(page):
        if block.path:
            python()
            assert not pathlib.PurePosixPath(block.path).is_absolute() and ".." not in block.path, block.path
            step(block, "file")
            directory = str(pathlib.PurePosixPath(block.path).parent)
            assert EOF not in block.code, f"{page}:{block.line}"
            lines += [f"mkdir -p {shlex.quote(directory)}", f"cat > {shlex.quote(block.path)} <<'{EOF}'",
                      block.code + EOF]
        elif block.run:
            python()
            step(block, "sh")
            lines.append(block.code)
        elif block.language == "python":
            group.append(block)
    python()
    lines.append('echo "== end end $(date +%s.%N)"')
    return "\n".join(lines) + "\n"


def outsider_environment() -> dict[str, str]:
    """This process's environment as a newcomer's shell has it: no AWS region or profile, no virtual environment,
    no PYTHONPATH, no JSII silencer, no test runner's variables, and no virtual environment's or node_modules'
    `bin` on PATH (their HOME, and so pip's and npm's caches and configuration, stay)."""
    env = {k: v for k, v in os.environ.items() if k not in AMBIENT and not k.startswith(AMBIENT_PREFIXES)}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and not (pathlib.Path(p).parent / "pyvenv.cfg").exists()
            and not p.endswith(os.path.join("node_modules", ".bin"))]
    return {**env, "PATH": os.pathsep.join(path)}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> pathlib.Path:
    """The wheels `make dist` builds (as it builds them), in a directory of their own."""
    dist = tmp_path_factory.mktemp("dist")
    build_wheels(dist, PROJECTS)
    return dist


# what each page's app is: its functions, its rules (by name)
SYNTHESIZED = {
    "your-first-job.md": ({"helpdesk-close_stale_tickets"}, {"helpdesk-close_stale_tickets"}),
    "your-first-pipeline.md": ({"thumbnails-reclaim_thumbnails", "thumbnails-thumb_wakeups-worker"},
                               {"thumbnails-reclaim_thumbnails"}),
}


def durations(out: str) -> list[tuple[str, float]]:
    """(step, seconds) from the transcript's `==` lines."""
    marks = [(f"{m.group(1)} {m.group(2)}", float(m.group(3))) for m in re.finditer(r"^== (\S+) (\S+) ([\d.]+)$", out, re.M)]
    return [(step, round(after - at, 1)) for (step, at), (_, after) in itertools.pairwise(marks)]


@pytest.mark.slow  # builds the wheels, a venv with their dependencies, the layer and a synthesis: minutes a page
@pytest.mark.parametrize("page", PAGES)
def test_a_new_directory_with_only_the_wheels_follows_the_page_to_a_synthesized_tested_app(page, wheels, tmp_path):
    # GIVEN a new directory holding only the wheels, and a shell that has nothing of this repository
    app, scratch = tmp_path / "app", tmp_path / "scratch"
    scratch.mkdir()
    shutil.copytree(wheels, app / "dist")
    script = scratch / "page.sh"
    script.write_text(transcript(page, scratch))
    # WHEN the page is followed, top to bottom, in one shell session
    done = subprocess.run(["bash", str(script)], cwd=app, env=outsider_environment(), capture_output=True, text=True,
                          timeout=1200)
    steps = durations(done.stdout)
    print(f"{page}: {sum(s for _, s in steps):.0f}s", *(f"{step} {s}s" for step, s in steps if s >= 1), sep="\n  ")
    failed_at = re.findall(r"^== (\S+ \S+)", done.stdout, re.M)[-1:]
    assert done.returncode == 0, f"{failed_at}: exit {done.returncode}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    # THEN its blocks ran, its tests passed (none skipped), and no synth printed the Node end-of-life banner
    assert re.search(r"^ran \d+ blocks$", done.stdout, re.M), done.stdout[-2000:]
    summaries = re.findall(r"^(\d+ passed.*) in [\d.]+s$", done.stdout, re.M)
    assert len(summaries) == 1 and re.fullmatch(r"\d+ passed", summaries[0]), summaries
    assert "end-of-life" not in done.stdout + done.stderr, done.stderr[-2000:]
    # AND the synthesized app (cdk.out, bundling on) has the page's functions and rule, on one built layer
    functions, rules = SYNTHESIZED[page]
    (template,) = (app / "cdk.out").glob("*.template.json")
    resources = json.loads(template.read_text())["Resources"]
    of = lambda kind: [r for r in resources.values() if r["Type"] == kind]  # noqa: E731
    assert {f["Properties"].get("FunctionName") for f in of("AWS::Lambda::Function")} == functions
    assert {r["Properties"]["Name"] for r in of("AWS::Events::Rule")} == rules
    (layer,) = of("AWS::Lambda::LayerVersion")
    assert layer["Metadata"]["aws:asset:is-bundled"] is True, layer["Metadata"]
    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.14"]
    built = app / "cdk.out" / layer["Metadata"]["aws:asset:path"] / "python"
    assert (built / "jobfence" / "__init__.py").is_file() and list(built.glob("jobfence-0.2.0.dist-info"))
    assert list(built.glob("pydantic_core/*aarch64*.so")), "the layer's native wheels are not arm64's"
    assert not (built / "botocore").exists() and not (built / "jobfence" / "testing").exists()
