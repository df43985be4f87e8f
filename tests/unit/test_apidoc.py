"""docs/api.md is generated from the public API's docstrings and type hints (`python -m ops.apidoc`).

The committed page must be what the generator writes today, and every public name, method and
property must have a docstring and type hints: a public name changed without regenerating the page,
or added undocumented, fails here.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from ops import apidoc  # noqa: E402


@pytest.fixture(scope="module")
def packages():
    return apidoc.packages()


def test_the_committed_api_page_is_what_the_generator_writes(packages):
    # GIVEN the public names of both packages WHEN the page is rendered
    # THEN the committed page is identical (else: run `python -m ops.apidoc`)
    assert apidoc.PAGE.read_text() == apidoc.render(packages), "docs/api.md is stale: run `python -m ops.apidoc`"


def test_every_public_name_has_a_docstring_and_type_hints(packages):
    assert apidoc.missing(packages) == []


def test_the_page_documents_every_name_of_the_runtime_contract(packages):
    import jobfence
    import jobfence.testing
    import jobfence_cdk

    page = apidoc.PAGE.read_text()
    for name in jobfence.__all__:
        assert f"#### `jobfence.{name}`" in page
    for name in jobfence.testing.__all__:  # the test kit's names too (simulate, JobHarness, LambdaContext, ...)
        assert f"#### `jobfence.testing.{name}`" in page
    for name in jobfence_cdk.__all__:
        assert f"#### `jobfence_cdk.{name}`" in page


def test_an_undocumented_kit_name_is_reported(monkeypatch, packages):
    import jobfence.testing

    monkeypatch.setattr(jobfence.testing.Tick.assert_ran, "__doc__", None)
    assert "jobfence.testing.Tick.assert_ran: no docstring" in apidoc.missing(packages)


def test_an_undocumented_public_method_is_reported(monkeypatch, packages):
    # GIVEN a public method that lost its docstring
    import jobfence

    monkeypatch.setattr(jobfence.Registry.job, "__doc__", None)
    # THEN the check names it, and the page no longer matches
    assert "jobfence.Registry.job: no docstring" in apidoc.missing(packages)
    assert apidoc.PAGE.read_text() != apidoc.render(packages)


def test_check_mode_exits_nonzero_on_a_stale_page(tmp_path, monkeypatch):
    monkeypatch.setattr(apidoc, "PAGE", tmp_path / "api.md")
    (tmp_path / "api.md").write_text("# stale\n")
    monkeypatch.setattr(apidoc, "ROOT", tmp_path)
    assert apidoc.main(["--check"]) == 1
    assert apidoc.main([]) == 0 and apidoc.main(["--check"]) == 0


# Errors a user never meets: the worker's signal to its batch processor (a message it turns into a batch item
# failure), and the schedule evaluator's (synthesis turns it into a CatalogError naming the entry).
INTERNAL_ERRORS = {"MessageFailed", "ScheduleError"}


def test_every_error_the_runtime_defines_is_exported_and_documented():
    import importlib
    import inspect
    import pathlib

    import jobfence

    root = pathlib.Path(jobfence.__file__).parent
    defined = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if "testing" in parts or path.name == "__init__.py" and len(parts) == 1:
            continue
        module = importlib.import_module(".".join(p for p in parts if p != "__init__"))
        defined |= {name for name, obj in vars(module).items()
                    if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == module.__name__}
    # GIVEN every exception class the runtime defines THEN each one a user can meet is a public name, on the page
    assert defined >= INTERNAL_ERRORS
    page = apidoc.PAGE.read_text()
    for name in sorted(defined - INTERNAL_ERRORS):
        assert name in jobfence.__all__, f"{name} is not exported from jobfence"
        assert f"#### `jobfence.{name}` (exception" in page, name
