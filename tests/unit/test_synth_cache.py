"""The local runtime's synthesis cache is keyed by every input of the CDK app, and nothing else."""

from __future__ import annotations

from jobfence_ops.runtime.template import inputs_hash


def test_the_hash_follows_the_app_its_code_and_the_context_but_not_bytecode(tmp_path):
    # GIVEN an app folder with the app and its function code, and the constructs' package (wherever installed)
    for name, text in {"app.py": "app", "cdk.json": "{}", "infra/jobfence_cdk/stack.py": "stack", "functions/jobs/a.py": "a"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    constructs = tmp_path / "infra/jobfence_cdk"
    first = inputs_hash(tmp_path, {}, constructs)
    # WHEN only bytecode or an unrelated folder changes, THEN the hash is the same
    (tmp_path / "functions/jobs/__pycache__").mkdir()
    (tmp_path / "functions/jobs/__pycache__/a.cpython-311.pyc").write_bytes(b"\0")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs/x.md").write_text("x")
    assert inputs_hash(tmp_path, {}, constructs) == first
    # WHEN a function's code, a construct or the context changes, THEN it differs
    (tmp_path / "functions/jobs/a.py").write_text("a2")
    changed_code = inputs_hash(tmp_path, {}, constructs)
    assert changed_code != first
    (tmp_path / "infra/jobfence_cdk/stack.py").write_text("stack2")
    assert inputs_hash(tmp_path, {}, constructs) != changed_code
    assert inputs_hash(tmp_path, {"schedules": "disabled"}, constructs) != inputs_hash(tmp_path, {}, constructs)
    # AND a file moved to another name is another input
    before = inputs_hash(tmp_path, {}, constructs)
    (tmp_path / "functions/jobs/a.py").rename(tmp_path / "functions/jobs/b.py")
    assert inputs_hash(tmp_path, {}, constructs) != before
