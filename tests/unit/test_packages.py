"""The distributions an outside app installs: `jobfence` (the runtime, its test kit and fault simulator
among it) and `jobfence-cdk` (the constructs); and `jobfence-ops`, the operator tooling, which neither needs.
Each states its license (Apache-2.0, the repository's LICENSE in the wheel), authors, classifiers and
project URLs, which are paths inside this repository; the runtime requires the AWS SDK only through its
`boto3` extra (Lambda provides it; `testing` includes the extra).

Each wheel is built here as `make dist` builds it (pip, offline, no isolation) and read back: the runtime's
and the constructs' hold every module of their source package and nothing else (no job, handler or
provider code of this repository), their version is the package's `__version__` and its CHANGELOG's newest
entry, and the constructs require the runtime of their own version. The runtime imports nothing of the
operator tooling: the kit's simulator (`jobfence.testing.sim`) ships in its own wheel, and the `testing`
extra declares what it runs on (moto, pytest), not `jobfence-ops`. This repository's app.py consumes the
constructs by their public names only, passing its catalog in.
"""

from __future__ import annotations

import ast
import email
import hashlib
import json
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

from tests.wheels import build_wheels

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = {"jobfence": ROOT / "functions" / "jobfence", "jobfence-cdk": ROOT / "infra" / "jobfence_cdk"}
FOREIGN = ("jobs", "handlers", "providers", "ops", "tests", "infra")


def source_modules(package_dir: pathlib.Path) -> set[str]:
    """The files a package's wheel holds: its modules and its PEP 561 marker, `py.typed`."""
    top = package_dir.name
    return {f"{top}/{p.relative_to(package_dir).as_posix()}" for p in package_dir.rglob("*.py")
            if "__pycache__" not in p.parts} | {f"{top}/py.typed"}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("dist")
    projects = [ROOT / "packages" / name for name in SOURCES] + [ROOT]  # ROOT: jobfence-ops (pyproject.toml)
    build_wheels(out, projects)
    built = {}
    for wheel in out.glob("*.whl"):
        archive = zipfile.ZipFile(wheel)
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        built[email.message_from_bytes(archive.read(meta))["Name"]] = archive
    return built


def metadata(archive: zipfile.ZipFile) -> email.message.Message:
    meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    return email.message_from_bytes(archive.read(meta))


def newest_changelog_version(name: str) -> str:
    text = (ROOT / "packages" / name / "CHANGELOG.md").read_text()
    return re.search(r"^## (\d+\.\d+\.\d+)", text, re.MULTILINE).group(1)


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_wheel_holds_every_module_of_its_package_and_nothing_else(wheels, name):
    # GIVEN the wheel `make dist` builds WHEN its files are listed
    files = {n for n in wheels[name].namelist() if ".dist-info/" not in n}
    # THEN they are exactly the source package's modules: no job, handler or provider code, no bytecode
    assert files == source_modules(SOURCES[name])
    assert not {f.split("/")[0] for f in files} & set(FOREIGN)


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
@pytest.mark.parametrize("name", [*sorted(SOURCES), "jobfence-ops"])
def test_every_wheel_is_typed_with_a_py_typed_marker_at_its_packages_top(wheels, name):
    # GIVEN a wheel WHEN its top-level packages are listed
    files = {n for n in wheels[name].namelist() if ".dist-info/" not in n}
    tops = {n.split("/")[0] for n in files}
    # THEN each holds `py.typed` (PEP 561), so a type checker reads the hints without stubs
    assert tops and all(f"{top}/py.typed" in files for top in tops), sorted(tops)


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_wheels_version_is_its_packages_and_its_changelogs_newest(wheels, name):
    version = metadata(wheels[name])["Version"]
    init = (SOURCES[name] / "__init__.py").read_text()
    assert re.search(r'^__version__ = "(.+?)"', init, re.MULTILINE).group(1) == version
    assert newest_changelog_version(name) == version


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
def test_the_constructs_require_the_runtime_of_their_own_version(wheels):
    requires = metadata(wheels["jobfence-cdk"]).get_all("Requires-Dist")
    assert f"jobfence=={metadata(wheels['jobfence'])['Version']}" in requires
    # and the runtime declares what its modules import (croniter: jobfence.schedule)
    runtime = {re.split(r"[\[<>=;! ]", r)[0] for r in metadata(wheels["jobfence"]).get_all("Requires-Dist")
               if "extra ==" not in r}
    assert {"aws-lambda-powertools", "pynamodb", "pydantic", "croniter"} <= runtime


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
def test_the_runtime_requires_the_aws_sdk_only_through_its_boto3_extra(wheels):
    from jobfence_cdk.code import RUNTIME_PROVIDED

    requires = metadata(wheels["jobfence"]).get_all("Requires-Dist")
    # GIVEN the SDK Lambda's runtime provides WHEN the runtime's requirements are read
    # THEN none is required unconditionally (a layer installing `jobfence` does not pull boto3 in by it)
    unconditional = {re.split(r"[\[<>=;! ]", r)[0] for r in requires if "extra ==" not in r}
    assert not unconditional & set(RUNTIME_PROVIDED), sorted(unconditional)
    # AND the `boto3` extra brings boto3 and botocore, and the `testing` extra (tests run outside Lambda) includes it
    boto3 = {re.split(r"[\[<>=;! ]", r)[0] for r in requires if 'extra == "boto3"' in r}
    assert boto3 == {"boto3", "botocore"}
    assert any(r.startswith("jobfence[boto3]") and 'extra == "testing"' in r for r in requires), requires


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
@pytest.mark.parametrize("name", [*sorted(SOURCES), "jobfence-ops"])
def test_every_wheel_states_its_license_authors_classifiers_and_urls_inside_the_repository(wheels, name):
    meta = metadata(wheels[name])
    # GIVEN a wheel WHEN its metadata is read THEN it is Apache-2.0, with the license text itself in the wheel
    assert meta["License"] == "Apache-2.0"
    assert "License :: OSI Approved :: Apache Software License" in meta.get_all("Classifier")
    (license_file,) = [n for n in wheels[name].namelist() if re.search(r"\.dist-info/(licenses/)?LICENSE$", n)]
    assert wheels[name].read(license_file) == (ROOT / "LICENSE").read_bytes()
    assert (ROOT / "LICENSE").read_text().split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert meta["Author"]
    # AND its classifiers name every Python it supports (requires-python >=3.11, up to Lambda's python3.14)
    assert meta["Requires-Python"] == ">=3.11"
    pythons = {c.rpartition(":: ")[2] for c in meta.get_all("Classifier") if c.startswith("Programming Language :: Python :: 3.")}
    assert pythons == {"3.11", "3.12", "3.13", "3.14"}
    # AND every project URL is a path inside this repository that exists (no outside host)
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert "Source" in urls and "Documentation" in urls, urls
    for label, url in urls.items():
        assert "://" not in url and not url.startswith(("/", "..")), (label, url)
        assert (ROOT / url).exists(), (label, url)


def imported_modules(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_package_imports_nothing_of_this_repositorys_app(name):
    for path in SOURCES[name].rglob("*.py"):
        foreign = {m for m in imported_modules(path) if m.split(".")[0] in FOREIGN}
        assert not foreign, f"{path.relative_to(ROOT)} imports {sorted(foreign)}"


@pytest.mark.slow  # builds the wheels (pip, a subprocess)
def test_the_kits_simulator_ships_in_the_runtime_whose_testing_extra_declares_what_it_runs_on(wheels):
    # GIVEN the runtime's wheel WHEN its files are listed THEN the simulator `simulate` runs is in it
    files = set(wheels["jobfence"].namelist())
    simulator = {f"jobfence/testing/sim/{m}.py" for m in ("kernel", "wire", "faults", "queue", "world", "job")}
    assert simulator <= files
    assert not any(n.startswith("ops/") for n in files)
    # AND its `testing` extra brings moto (the simulator's wire) and pytest, not the operator tooling
    testing = [r for r in metadata(wheels["jobfence"]).get_all("Requires-Dist") if 'extra == "testing"' in r]
    assert {re.split(r"[\[<>=;! ]", r)[0] for r in testing} == {"jobfence", "moto", "pytest"}, testing  # [boto3]
    assert any(r.startswith("moto[dynamodb]") for r in testing)
    # AND the operator tooling requires the runtime of its version
    ops_meta = metadata(wheels["jobfence-ops"])
    assert ops_meta["Version"] == metadata(wheels["jobfence"])["Version"]
    assert f"jobfence=={ops_meta['Version']}" in ops_meta.get_all("Requires-Dist")
    ops_files = {n for n in wheels["jobfence-ops"].namelist() if ".dist-info/" not in n}
    # AND the operator wheel is the tooling any app runs, under its own name: nothing of this repository's `ops`
    assert {"jobfence_ops/cli.py", "jobfence_ops/app.py", "jobfence_ops/runtime/runtime.py"} <= ops_files
    # AND the console's own stylesheet and live-view script, which it serves from the package
    assert {"jobfence_ops/console/static/console.css", "jobfence_ops/console/static/live.js"} <= ops_files
    assert not any(n.startswith("ops/") for n in ops_files)


def test_app_py_uses_the_constructs_public_names_only_and_passes_its_catalog_in():
    import jobfence_cdk

    tree = ast.parse((ROOT / "app.py").read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
               and n.module.split(".")[0] in ("jobfence_cdk", "infra")]
    assert [n.module for n in imports] == ["jobfence_cdk"]
    assert {a.name for n in imports for a in n.names} <= set(jobfence_cdk.__all__)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "build_app"]
    assert [ast.unparse(c.args[1]) for c in calls] == ["CATALOG"]


def test_every_public_name_of_the_constructs_exists():
    import jobfence_cdk

    assert all(hasattr(jobfence_cdk, name) for name in jobfence_cdk.__all__)


def test_the_layer_hash_follows_the_local_wheels_a_find_links_line_names(tmp_path):
    from jobfence_cdk.code import layer_asset_hash

    # GIVEN a functions directory whose requirements install a wheel from a local directory
    (tmp_path / "dist").mkdir()
    (tmp_path / "functions").mkdir()
    requirements = tmp_path / "functions" / "requirements.txt"
    requirements.write_text("--find-links ../dist\njobfence==0.2.0\n")
    wheel = tmp_path / "dist" / "jobfence-0.2.0-py3-none-any.whl"
    wheel.write_bytes(b"first build")
    before = layer_asset_hash(requirements, "manylinux2014_aarch64", "3.14")
    # WHEN the wheel is rebuilt under the same version THEN the layer is a new one
    wheel.write_bytes(b"second build")
    assert layer_asset_hash(requirements, "manylinux2014_aarch64", "3.14") != before
    # and a requirements file without local wheels hashes what builds the bundle: the file, the platform, the
    # Python version and what is pruned from it (a bundle from before the pruning is never reused)
    plain = tmp_path / "functions" / "plain.txt"
    plain.write_text("pynamodb==6.1.0\n")
    pruned = b"boto3,botocore,s3transfer,jmespath,jobfence/testing,providers/*_fake.py"
    expected = hashlib.sha256(b"\0".join([b"pynamodb==6.1.0\n", b"p", b"3.14", pruned])).hexdigest()
    assert layer_asset_hash(plain, "p", "3.14") == expected


def test_the_venvs_editable_installs_expose_the_three_packages_and_nothing_else_of_this_repository(tmp_path):
    """`make install` installs the runtime, the constructs and the operator tooling editable; a guide's app run
    in this venv found this repository's `handlers.scheduled` instead of its own when the runtime's editable
    install put the whole functions/ folder on the path."""
    probe = ("import importlib.util as u, json; "
             "print(json.dumps({m: bool(u.find_spec(m)) for m in "
             "['jobfence', 'jobfence_cdk', 'jobfence_ops', 'jobs', 'handlers', 'providers', 'ops']}))")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = json.loads(subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True,
                                      text=True, check=True).stdout)
    assert found == {"jobfence": True, "jobfence_cdk": True, "jobfence_ops": True,
                     "jobs": False, "handlers": False, "providers": False, "ops": False}, "run `make install`"
