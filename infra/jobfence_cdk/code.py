"""The one code asset (the app's functions directory) and its dependency layer, built without Docker.

The layer is `pip install`ed locally for a Lambda Python runtime and an architecture (by default `RUNTIME`,
python3.14, and `ARCHITECTURE`, arm64: 20% cheaper per GB-s; docs/benchmarks.md, "Cold start", says why;
an app may pass others to `FunctionCode`) from manylinux wheels only (from `<functions>/requirements.txt`;
a local wheel such as the `jobfence` runtime's is found through a `--find-links` line there, which pip
reads relative to that file), so `cdk synth` needs no Docker: every native dependency (pydantic-core,
cryptography, cffi, wrapt) publishes aarch64 wheels for cp314. Then what Lambda does not need is taken
out of the bundle (`prune_layer`): the AWS SDK, which every Lambda Python runtime provides
(`RUNTIME_PROVIDED`: botocore arrives anyway as a requirement of pynamodb and aws-xray-sdk, and alone was
more than half the layer), and the runtime wheel's test kit (`TEST_ONLY`). Its asset hash is the hash
of the requirements file, the wheels in its local `--find-links` directories (a wheel rebuilt under the
same version is a new layer), the wheel platform, the Python version and what is pruned
(`layer_asset_hash`), so editing job code never rebuilds the layer, an unchanged requirements file reuses
the bundle already in cdk.out, and a change of runtime or architecture never reuses (nor skips
uploading) another's wheels.
Both ship compiled bytecode for the runtime's Python when the build has that Python (`jobfence_cdk.bytecode`:
`python3.N` on the PATH, or Pyodide's from the app's `node_modules`): without it a cold start compiles every
module it imports; without one, they ship their sources and synthesis says so. The code asset is staged by
`stage_asset` (its hash, `code_asset_hash`, is its files' and whether it is compiled).
Tests skip bundling with CDK's own context `aws:cdk:bundling-stacks=[]`
(`SKIP_BUNDLING_CONTEXT`); `make synth` does not set it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib.metadata
import pathlib
import re
import shutil
import subprocess
import sys

import jsii
from aws_cdk import Annotations, AssetHashType, BundlingOptions, DockerImage, ILocalBundling, Stack
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from jobfence_cdk.bytecode import Compiler, copy_tree, find_compiler

RUNTIME = lambda_.Runtime.PYTHON_3_14  # the newest Lambda Python runtime; the pinned wheels exist for cp314
ARCHITECTURE = lambda_.Architecture.ARM_64
# the wheel platform of each architecture (pip's --platform); the layer is built for its functions' architecture
WHEEL_PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}
REQUIREMENTS = "requirements.txt"  # the dependency list, at the top of the functions directory
SKIP_BUNDLING_CONTEXT: dict[str, list[str]] = {"aws:cdk:bundling-stacks": []}
"""App context that bundles no stack: the layer is not built (tests synthesize with it; `cdk synth` does not)."""

# Development leftovers never belong in the asset, nor does code only tests and the local tools run: the
# runtime's test kit and the fake providers (the local runtime's functions run the asset too, and import
# neither; `tests/infra/test_infra_code.py` checks the staged asset). The layer drops them too: an app's
# `jobfence` comes from the runtime wheel, which holds the kit.
TEST_ONLY = ["jobfence/testing", "providers/*_fake.py"]
_EXCLUDE = ["__pycache__", "*.pyc", ".pytest_cache", "requirements.txt", *TEST_ONLY]
# The AWS SDK for Python and its own libraries, which every Lambda Python runtime ships (and imports from
# /var/runtime when the layer has none); python-dateutil, six and urllib3 also ship there but stay in the
# layer: other distributions (croniter) require them, and they are small.
RUNTIME_PROVIDED = ("boto3", "botocore", "s3transfer", "jmespath")
_PYTHON_RUNTIME = re.compile(r"^python(3\.\d+)$")
TASK_ROOT = "/var/task"  # where Lambda unpacks the code asset
LAYER_ROOT = "/opt/python"  # where the layer's `python/` directory is


def excluded(relative: str) -> bool:
    """Whether the asset leaves out the file or directory at `relative` (a path under the functions directory,
    with "/"): `_EXCLUDE`, a pattern with a "/" matched from the top, one without it against any name."""
    parts = relative.split("/")
    for pattern in _EXCLUDE:
        if "/" in pattern:
            if any(fnmatch.fnmatchcase("/".join(parts[: n + 1]), pattern) for n in range(len(parts))):
                return True
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return True
    return False


def asset_files(functions_dir: pathlib.Path) -> list[str]:
    """The files the code asset holds (paths relative to `functions_dir`, with "/"): all but `_EXCLUDE`."""
    source = pathlib.Path(functions_dir).resolve()
    every = (path.relative_to(source).as_posix() for path in sorted(source.rglob("*")) if path.is_file())
    return [relative for relative in every if not excluded(relative)]


def stage_asset(functions_dir: pathlib.Path, out: pathlib.Path, compiler: Compiler | None = None) -> bool:
    """Write into `out` what the code asset holds: `asset_files`, then (with a `compiler`) their unchecked-hash
    `.pyc`s for `TASK_ROOT`, so Lambda's Python never compiles them at a cold start. Returns whether it compiled."""
    copy_tree(functions_dir, out, asset_files(functions_dir))
    if compiler is None:
        return False
    compiler.compile(pathlib.Path(out), TASK_ROOT)
    return True


def code_asset_hash(functions_dir: pathlib.Path, compiler: Compiler | None) -> str:
    """The code asset's hash: its files (names and bytes) and the bytecode it ships (whose Python, or none), so
    a bundle built without a compiler is never reused by a build that has one, nor the other way round."""
    digest = hashlib.sha256(f"bytecode {compiler.python if compiler else 'none'}".encode())
    source = pathlib.Path(functions_dir).resolve()
    for relative in asset_files(source):
        digest.update(b"\0" + relative.encode() + b"\0" + (source / relative).read_bytes())
    return digest.hexdigest()


def python_version(runtime: lambda_.Runtime) -> str:
    """The Python version of a Lambda Python runtime ("python3.14" -> "3.14"); another runtime is refused."""
    match = _PYTHON_RUNTIME.match(runtime.name)
    if runtime.family != lambda_.RuntimeFamily.PYTHON or match is None:
        raise ValueError(f"runtime {runtime.name!r}: jobfence functions run on a Lambda Python runtime (python3.N)")
    return match.group(1)


def wheel_platform(architecture: lambda_.Architecture) -> str:
    """pip's --platform for the layer of an architecture; one without manylinux wheels is refused."""
    if architecture.name not in WHEEL_PLATFORMS:
        raise ValueError(f"architecture {architecture.name!r}: expected one of {sorted(WHEEL_PLATFORMS)}")
    return WHEEL_PLATFORMS[architecture.name]


def layer_asset_hash(requirements: pathlib.Path, platform: str, python: str, compiled: bool = False) -> str:
    """The layer's asset hash: what its bundle is built from (the pinned requirements, the local wheels
    they may install, the wheel platform and Python version), what is pruned from it and whether it ships
    bytecode."""
    pruned = ",".join([*RUNTIME_PROVIDED, *TEST_ONLY])
    digest = hashlib.sha256(
        b"\0".join([requirements.read_bytes(), platform.encode(), python.encode(), pruned.encode()])
    )
    if compiled:
        digest.update(b"\0bytecode")
    for wheel in local_wheels(requirements):
        digest.update(b"\0" + wheel.name.encode() + b"\0" + wheel.read_bytes())
    return digest.hexdigest()


def local_wheels(requirements: pathlib.Path) -> list[pathlib.Path]:
    """The wheels in the local directories of the file's `--find-links` lines (relative to it, as pip reads them)."""
    wheels: list[pathlib.Path] = []
    for line in requirements.read_text().splitlines():
        option, _, value = line.split("#")[0].strip().partition(" ")
        if option in ("--find-links", "-f") and value.strip():
            directory = requirements.parent / value.strip()
            if directory.is_dir():
                wheels += sorted(directory.glob("*.whl"))
    return wheels


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def prune_layer(target: pathlib.Path) -> list[str]:
    """Remove from an installed layer (`target`, the `python/` directory) the distributions Lambda's runtime
    provides (`RUNTIME_PROVIDED`, every file their RECORD lists) and the test-only code (`TEST_ONLY`).

    Returns what was removed: distribution names, then paths, sorted.
    """
    target = pathlib.Path(target).resolve()
    removed: list[str] = []
    provided = {_canonical(name) for name in RUNTIME_PROVIDED}
    for dist in importlib.metadata.distributions(path=[str(target)]):
        name = dist.metadata["Name"] or ""
        if _canonical(name) not in provided:
            continue
        for file in dist.files or []:
            path = pathlib.Path(str(dist.locate_file(file))).resolve()
            if path.is_relative_to(target) and path.is_file():  # never outside the layer (a script's ../bin)
                path.unlink()
        removed.append(name)
    for pattern in TEST_ONLY:
        for path in sorted(target.glob(pattern)):
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path.relative_to(target).as_posix())
    for directory in sorted((d for d in target.rglob("*") if d.is_dir()), reverse=True):  # deepest first
        if not any(directory.iterdir()):
            directory.rmdir()
    return sorted(r for r in removed if "/" not in r) + sorted(r for r in removed if "/" in r)


@jsii.implements(ILocalBundling)
class _AssetBundling:
    """Stages the code asset (`stage_asset`), compiled when there is a compiler."""

    def __init__(self, functions_dir: pathlib.Path, compiler: Compiler | None) -> None:
        self.functions_dir, self.compiler = functions_dir, compiler

    def try_bundle(self, output_dir: str, *_options, **_kw) -> bool:
        stage_asset(self.functions_dir, pathlib.Path(output_dir), self.compiler)
        return True


@jsii.implements(ILocalBundling)
class _PipLayerBundling:
    """Installs a requirements file into <output>/python with manylinux wheels, then prunes it (`prune_layer`)
    and, with a compiler, compiles it for `LAYER_ROOT` (pip's own bytecode would be this machine's Python's)."""

    def __init__(self, requirements: pathlib.Path, platform: str, python: str, compiler: Compiler | None) -> None:
        self.requirements, self.platform, self.python, self.compiler = requirements, platform, python, compiler

    def try_bundle(self, output_dir: str, *_options, **_kw) -> bool:
        target = pathlib.Path(output_dir) / "python"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--platform",
                self.platform,
                "--implementation",
                "cp",
                "--python-version",
                self.python,
                "--only-binary=:all:",
                "--no-compile",
                "--target",
                str(target),
                "-r",
                str(self.requirements),
            ],
            check=True,
        )
        prune_layer(target)
        if self.compiler is not None:
            self.compiler.compile(target, LAYER_ROOT)
        return True


class FunctionCode(Construct):
    """Code asset and dependency layer shared by every function of the stack.

    `functions_dir` is the code asset: handler and job packages, and the `requirements.txt` the layer is
    built from; `runtime` (a Lambda Python runtime) and `architecture` are those of every function that
    runs the code, and the layer's wheels are pip's for them. Attributes: `functions_dir`, `runtime`,
    `architecture`, `code` (the asset), `layer` (the dependencies).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        functions_dir: pathlib.Path,
        runtime: lambda_.Runtime = RUNTIME,
        architecture: lambda_.Architecture = ARCHITECTURE,
    ) -> None:
        python, platform = python_version(runtime), wheel_platform(architecture)  # refused before any construct
        super().__init__(scope, construct_id)
        self.functions_dir = pathlib.Path(functions_dir).resolve()
        self.runtime, self.architecture = runtime, architecture
        requirements = self.functions_dir / REQUIREMENTS
        self.compiler = find_compiler(python, [self.functions_dir])
        if self.compiler is None:
            Annotations.of(self).add_info(
                f"no Python {python} to compile with (python{python} on the PATH, or the npm package pyodide): "
                "the code asset and the layer ship their sources, compiled at every cold start"
            )
        if self.compiler is not None and Stack.of(self).bundling_required:
            self.code = lambda_.Code.from_asset(
                str(self.functions_dir),
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=code_asset_hash(self.functions_dir, self.compiler),
                bundling=BundlingOptions(
                    image=DockerImage.from_registry("jobfence-no-docker"),  # never pulled, as the layer's
                    local=_AssetBundling(self.functions_dir, self.compiler),
                ),
            )
        else:  # the same files, staged by CDK (a synthesis that bundles nothing still stages this asset)
            self.code = lambda_.Code.from_asset(str(self.functions_dir), exclude=_EXCLUDE)
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            description="runtime dependencies of functions/ (functions/requirements.txt)",
            compatible_runtimes=[runtime],
            compatible_architectures=[architecture],
            code=lambda_.Code.from_asset(
                str(self.functions_dir),
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=layer_asset_hash(requirements, platform, python, compiled=self.compiler is not None),
                bundling=BundlingOptions(
                    # Never pulled: local bundling always succeeds or raises.
                    image=DockerImage.from_registry("jobfence-no-docker"),
                    local=_PipLayerBundling(requirements, platform, python, self.compiler),
                ),
            ),
        )
