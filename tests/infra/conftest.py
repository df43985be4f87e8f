"""Synthesized templates, built once per test session (jsii synthesis is slow).

`synthesized` is the app exactly as `make synth` builds it from the real
catalog, cdk-nag packs included, minus dependency bundling. If nag refuses the
app, its report is kept for `test_infra_nag` and the other tests get a
template synthesized without the packs, so one finding does not hide the rest.
`disabled_template` is the same app with `-c schedules=disabled`.
"""

from __future__ import annotations

import json
import os
import pathlib
import tempfile
from dataclasses import dataclass

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import pytest  # noqa: E402


@dataclass
class Synthesis:
    stack: object
    template: object  # aws_cdk.assertions.Template
    nag_report: dict | None  # validation-report.json of the nag packs
    nag_error: str | None  # the message when the packs refused the app


def synthesize(catalog, **context):
    """Build the app as app.py does (nag off unless asked), without bundling; return (stack, Template)."""
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import build_app
    from infra.code import SKIP_BUNDLING_CONTEXT

    app = App(context={**SKIP_BUNDLING_CONTEXT, "nag": "false", **context}, outdir=tempfile.mkdtemp(prefix="cdk-"))
    stack = build_app(app, catalog)
    return stack, Template.from_stack(stack)


def _synthesize_with_nag(catalog) -> Synthesis:
    from aws_cdk import App
    from aws_cdk.assertions import Template

    from infra.app import STACK_NAME, build_app
    from infra.code import SKIP_BUNDLING_CONTEXT

    outdir = pathlib.Path(tempfile.mkdtemp(prefix="cdk-"))
    app = App(context={**SKIP_BUNDLING_CONTEXT, "nag": "true"}, outdir=str(outdir))
    stack = build_app(app, catalog)
    try:
        app.synth()
    except RuntimeError as exc:
        report = outdir / "validation-report.json"
        stack, template = synthesize(catalog)
        return Synthesis(stack, template, json.loads(report.read_text()) if report.exists() else None, str(exc))
    template = Template.from_json(json.loads((outdir / f"{STACK_NAME}.template.json").read_text()))
    return Synthesis(stack, template, json.loads((outdir / "validation-report.json").read_text()), None)


@pytest.fixture(scope="session")
def synthesized() -> Synthesis:
    from jobs.catalog import CATALOG

    return _synthesize_with_nag(CATALOG)


@pytest.fixture(scope="session")
def stack(synthesized):
    return synthesized.stack


@pytest.fixture(scope="session")
def template(synthesized):
    return synthesized.template


@pytest.fixture(scope="session")
def resources(template) -> dict:
    """Logical id -> resource of the synthesized template."""
    return template.to_json()["Resources"]


@pytest.fixture(scope="session")
def disabled_template():
    from jobs.catalog import CATALOG

    return synthesize(CATALOG, schedules="disabled")[1]


@pytest.fixture(scope="session")
def synthesize_app():
    """`synthesize(catalog, **context)` for tests that need their own (cheap, failing) synthesis."""
    return synthesize
