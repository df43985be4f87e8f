"""Synthesize the CDK app and deploy its template into the emulator's CloudFormation.

The same app `cdk deploy` runs (`app.py`), with bundling skipped (the layer of
dependencies is not needed locally: workers run on this checkout's venv) and
the cdk-nag packs off (they only validate). Deployment does what the CDK
bootstrap and `cdk deploy` would: the bootstrap version parameter, the asset
bucket, every file asset uploaded (zipped when the manifest says so) under its
object key, then `CreateStack` with the template.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CACHE_DIR = pathlib.Path(".jobfence") / "synth"  # in the app's directory: one cloud assembly per hash of its inputs
# what the synthesized assembly depends on: the app, the function code it stages (the constructs' package is
# hashed wherever it is installed: this repository's infra/, or an app's site-packages)
APP_INPUTS = ("app.py", "cdk.json", "functions")
CONSTRUCTS_PACKAGE = "jobfence_cdk"
BOOTSTRAP_QUALIFIER = "hnb659fds"  # the CDK default; the synthesized template names it
BOOTSTRAP_VERSION_PARAMETER = f"/cdk-bootstrap/{BOOTSTRAP_QUALIFIER}/version"
BOOTSTRAP_VERSION = "30"
# CDK's own switch for "bundle no stack" (the jobfence_cdk package exposes it as SKIP_BUNDLING_CONTEXT).
SKIP_BUNDLING: dict[str, list[str]] = {"aws:cdk:bundling-stacks": []}
STACK_STATUS_DONE = {"CREATE_COMPLETE", "UPDATE_COMPLETE"}


class DeployError(RuntimeError):
    """Synthesis or deployment into the emulator failed; the message says which step and why."""


@dataclass(frozen=True)
class FileAsset:
    """One file asset of the cloud assembly: where it is on disk and where it goes in S3."""

    source: pathlib.Path
    packaging: str  # "zip" (a folder) or "file"
    object_key: str


@dataclass(frozen=True)
class CloudAssembly:
    """The synthesized stack: its name, template and file assets."""

    directory: pathlib.Path
    stack_name: str
    template: Mapping[str, Any]
    assets: tuple[FileAsset, ...]

    def code_directory(self, s3_key: str) -> pathlib.Path | None:
        """The folder on disk of the asset uploaded under `s3_key` (a function's code)."""
        for asset in self.assets:
            if asset.object_key == s3_key and asset.packaging == "zip":
                return asset.source
        return None


def synthesize(out_dir: pathlib.Path, context: Mapping[str, Any] | None, app_dir: pathlib.Path) -> CloudAssembly:
    """Run the CDK app (`app.py`) into `out_dir` and read the assembly back."""
    app = app_dir / "app.py"
    if not app.is_file():
        raise DeployError(f"no CDK app at {app}: the app's directory has no app.py")
    # as `cdk synth` runs it: cdk.json's context first (the app's prefix, ...), then the runtime's own
    ctx = {**_cdk_json_context(app_dir), "nag": "false", **SKIP_BUNDLING, **dict(context or {})}
    env = {
        **os.environ,
        # the app synthesizes with the constructs and runtime this tooling sees (installed, or this repository's)
        "PYTHONPATH": os.pathsep.join([*package_parents(), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "CDK_OUTDIR": str(out_dir),
        "CDK_CONTEXT_JSON": json.dumps(ctx),
        "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20",
        "JSII_SILENCE_WARNING_UNTESTED_NODE_VERSION": "1",
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    done = subprocess.run([sys.executable, str(app)], cwd=app_dir, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-15:])
        raise DeployError(f"cdk synth failed (exit {done.returncode}):\n{tail}")
    return read_assembly(out_dir)


def _cdk_json_context(app_dir: pathlib.Path) -> dict[str, Any]:
    path = app_dir / "cdk.json"
    if not path.is_file():
        return {}
    try:
        context = json.loads(path.read_text()).get("context", {})
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
        raise DeployError(f"{path}: not valid JSON ({exc})") from None
    return dict(context) if isinstance(context, dict) else {}


def package_dir(name: str) -> pathlib.Path | None:
    """The folder a package is imported from in this process (repository or installed), without importing it."""
    spec = importlib.util.find_spec(name)
    return pathlib.Path(spec.origin).parent if spec is not None and spec.origin else None


def package_parents(names: tuple[str, ...] = (CONSTRUCTS_PACKAGE, "jobfence")) -> list[str]:
    """The folders holding the named packages (default: the constructs' and the runtime's), for a child
    process that must import the very same ones."""
    found: list[str] = []
    for folder in filter(None, map(package_dir, names)):
        if str(folder.parent) not in found:
            found.append(str(folder.parent))
    return found


def inputs_hash(app_dir: pathlib.Path, context: Mapping[str, Any], constructs: pathlib.Path | None = None) -> str:
    """A hash of every file the synthesis reads (names and contents) and of the context: the app's inputs and
    the constructs' package (`constructs`, default: the one this tooling imports)."""
    digest = hashlib.sha256(json.dumps(dict(context), sort_keys=True).encode())
    package = constructs or package_dir(CONSTRUCTS_PACKAGE)
    tops = [(app_dir, app_dir / name) for name in APP_INPUTS]
    if package is not None:
        tops.append((package.parent, package))
    for base, top in tops:
        files = (
            [top]
            if top.is_file()
            else sorted(p for p in top.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        )
        for path in files:
            digest.update(str(path.relative_to(base)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def cached_synthesis(
    context: Mapping[str, Any] | None, app_dir: pathlib.Path, cache: pathlib.Path | None = None
) -> CloudAssembly:
    """`synthesize`, once per hash of the app's inputs: later starts reuse the assembly (seconds saved each)."""
    ctx = dict(context or {})
    cache = cache or app_dir / CACHE_DIR
    final = cache / inputs_hash(app_dir, ctx)
    if (final / "manifest.json").is_file():
        return read_assembly(final)
    scratch = cache / f".{final.name}-{uuid.uuid4().hex[:8]}"
    synthesize(scratch, ctx, app_dir)
    try:
        scratch.rename(final)  # atomic: two processes synthesizing at once both end with one complete assembly
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)  # another process got there first
    return read_assembly(final)


def read_assembly(out_dir: pathlib.Path) -> CloudAssembly:
    """The single CloudFormation stack of a cloud assembly and its file assets."""
    manifest = json.loads((out_dir / "manifest.json").read_text())
    stacks = [(name, a) for name, a in manifest["artifacts"].items() if a["type"] == "aws:cloudformation:stack"]
    if len(stacks) != 1:
        raise DeployError(f"expected one stack in the assembly, found {[n for n, _ in stacks]}")
    stack_name, artifact = stacks[0]
    template = json.loads((out_dir / artifact["properties"]["templateFile"]).read_text())
    assets: list[FileAsset] = []
    for a in manifest["artifacts"].values():
        if a["type"] != "cdk:asset-manifest":
            continue
        files = json.loads((out_dir / a["properties"]["file"]).read_text()).get("files", {})
        for entry in files.values():
            source = pathlib.Path(entry["source"]["path"])
            source = source if source.is_absolute() else out_dir / source
            for destination in entry["destinations"].values():
                assets.append(FileAsset(source, entry["source"].get("packaging", "file"), destination["objectKey"]))
    return CloudAssembly(out_dir, stack_name, template, tuple(assets))


def _zip_folder(folder: pathlib.Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                archive.write(path, path.relative_to(folder))
    return buffer.getvalue()


def deploy(session: Any, assembly: CloudAssembly, timeout_s: float = 120) -> dict[str, Any]:
    """Bootstrap the emulator like `cdk bootstrap`, publish the assets, create the stack.

    Returns the stack description. Raises `DeployError` with CloudFormation's reason.
    """
    account = session.client("sts").get_caller_identity()["Account"]
    region = session.region_name
    session.client("ssm").put_parameter(
        Name=BOOTSTRAP_VERSION_PARAMETER, Value=BOOTSTRAP_VERSION, Type="String", Overwrite=True
    )
    bucket = f"cdk-{BOOTSTRAP_QUALIFIER}-assets-{account}-{region}"
    s3 = session.client("s3")
    s3.create_bucket(Bucket=bucket)
    published: dict[pathlib.Path, bytes] = {}
    for asset in assembly.assets:
        if asset.packaging == "zip":
            body = published.setdefault(asset.source, _zip_folder(asset.source))
        else:
            body = asset.source.read_bytes()
        s3.put_object(Bucket=bucket, Key=asset.object_key, Body=body)
    cfn = session.client("cloudformation")
    try:
        cfn.create_stack(
            StackName=assembly.stack_name,
            TemplateBody=json.dumps(assembly.template),
            Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM", "CAPABILITY_AUTO_EXPAND"],
        )
    except Exception as exc:  # the emulator's refusal, named
        raise DeployError(f"CreateStack {assembly.stack_name} was refused: {exc}") from exc
    deadline = time.monotonic() + timeout_s
    while True:
        stack = cfn.describe_stacks(StackName=assembly.stack_name)["Stacks"][0]
        status = stack["StackStatus"]
        if status in STACK_STATUS_DONE:
            return stack
        if status.endswith("FAILED") or "ROLLBACK" in status:
            raise DeployError(f"stack {assembly.stack_name}: {status}: {stack.get('StackStatusReason')}")
        if time.monotonic() > deadline:
            raise DeployError(f"stack {assembly.stack_name} still {status} after {timeout_s}s")
        time.sleep(0.2)
