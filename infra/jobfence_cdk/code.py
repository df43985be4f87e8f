"""The one code asset (the app's functions directory) and its dependency layer, built without Docker.

The layer is `pip install`ed locally for the runtime (`RUNTIME`, python3.14) and the architecture
(`ARCHITECTURE`, arm64: 20% cheaper per GB-s; docs/benchmarks.md, "Cold start", says why) from manylinux
wheels only (from `<functions>/requirements.txt`; a local wheel such as the `jobfence` runtime's is found
through a `--find-links` line there, which pip reads relative to that file), so `cdk synth` needs no
Docker: every native dependency (pydantic-core, cryptography, cffi, wrapt) publishes aarch64 wheels for
cp314. Its asset hash is the hash of the requirements file, the wheels in its local `--find-links`
directories (a wheel rebuilt under the same version is a new layer) and the wheel platform
(`layer_asset_hash`), so editing job code never rebuilds the layer, an unchanged requirements file reuses
the bundle already in cdk.out, and a change of architecture never reuses (nor skips uploading) the other
architecture's wheels.
Tests skip bundling with CDK's own context `aws:cdk:bundling-stacks=[]`
(`SKIP_BUNDLING_CONTEXT`); `make synth` does not set it.
"""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
import sys

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

RUNTIME = lambda_.Runtime.PYTHON_3_14  # the newest Lambda Python runtime; the pinned wheels exist for cp314
ARCHITECTURE = lambda_.Architecture.ARM_64
# the wheel platform of each architecture (pip's --platform); the layer is built for ARCHITECTURE's
WHEEL_PLATFORMS = {"arm64": "manylinux2014_aarch64", "x86_64": "manylinux2014_x86_64"}
REQUIREMENTS = "requirements.txt"  # the dependency list, at the top of the functions directory
SKIP_BUNDLING_CONTEXT: dict[str, list[str]] = {"aws:cdk:bundling-stacks": []}
"""App context that bundles no stack: the layer is not built (tests synthesize with it; `cdk synth` does not)."""

# Development leftovers never belong in the asset, nor does code only tests and the local tools run: the
# runtime's test kit and the fake providers (the local runtime's functions run the asset too, and import
# neither; `tests/infra/test_infra_code.py` checks the staged asset).
TEST_ONLY = ["jobfence/testing", "providers/*_fake.py"]
_EXCLUDE = ["__pycache__", "*.pyc", ".pytest_cache", "requirements.txt", *TEST_ONLY]


def layer_asset_hash(requirements: pathlib.Path, platform: str) -> str:
    """The layer's asset hash: what its bundle is built from (the pinned requirements, the local wheels
    they may install, the wheel platform)."""
    digest = hashlib.sha256(requirements.read_bytes() + b"\0" + platform.encode())
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


@jsii.implements(ILocalBundling)
class _PipLayerBundling:
    """Installs a requirements file into <output>/python with manylinux wheels."""

    def __init__(self, requirements: pathlib.Path) -> None:
        self.requirements = requirements

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
                WHEEL_PLATFORMS[ARCHITECTURE.name],
                "--implementation",
                "cp",
                "--python-version",
                RUNTIME.name.removeprefix("python"),
                "--only-binary=:all:",
                "--target",
                str(target),
                "-r",
                str(self.requirements),
            ],
            check=True,
        )
        return True


class FunctionCode(Construct):
    """Code asset and dependency layer shared by every function of the stack.

    `functions_dir` is the code asset: handler and job packages, and the `requirements.txt` the layer is
    built from. Attributes: `functions_dir`, `code` (the asset), `layer` (the dependencies).
    """

    def __init__(self, scope: Construct, construct_id: str, *, functions_dir: pathlib.Path) -> None:
        super().__init__(scope, construct_id)
        self.functions_dir = pathlib.Path(functions_dir).resolve()
        requirements = self.functions_dir / REQUIREMENTS
        self.code = lambda_.Code.from_asset(str(self.functions_dir), exclude=_EXCLUDE)
        self.layer = lambda_.LayerVersion(
            self,
            "Dependencies",
            description="runtime dependencies of functions/ (functions/requirements.txt)",
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            code=lambda_.Code.from_asset(
                str(self.functions_dir),
                asset_hash_type=AssetHashType.CUSTOM,
                asset_hash=layer_asset_hash(requirements, WHEEL_PLATFORMS[ARCHITECTURE.name]),
                bundling=BundlingOptions(
                    # Never pulled: local bundling always succeeds or raises.
                    image=DockerImage.from_registry("jobfence-no-docker"),
                    local=_PipLayerBundling(requirements),
                ),
            ),
        )
