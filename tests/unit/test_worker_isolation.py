"""The isolates' fork server preloads the layer's libraries only: a function's own code loads in its isolate."""

from __future__ import annotations

import pathlib

import pytest

from jobfence_ops.runtime.worker import _refuse_preloaded_code
from jobfence_ops.runtime.workers import CHECKOUT_FUNCTIONS, LAYER_PRELOAD


def test_the_fork_server_preloads_no_package_of_the_function_code():
    own = {p.name for p in CHECKOUT_FUNCTIONS.iterdir() if (p / "__init__.py").is_file()}
    assert own >= {"jobfence", "handlers", "jobs"}
    assert not {name.partition(".")[0] for name in LAYER_PRELOAD} & own


def test_an_isolate_refuses_to_start_when_its_code_was_loaded_before_its_cold_start(tmp_path: pathlib.Path):
    (tmp_path / "json").mkdir()  # a code folder whose package is already loaded in this process
    (tmp_path / "json" / "__init__.py").write_text("")
    with pytest.raises(ImportError, match="loaded before its cold start: json"):
        _refuse_preloaded_code(str(tmp_path))


def test_an_isolate_starts_when_none_of_its_code_is_loaded(tmp_path: pathlib.Path):
    (tmp_path / "never_imported_pkg").mkdir()
    (tmp_path / "never_imported_pkg" / "__init__.py").write_text("")
    (tmp_path / "never_imported_module.py").write_text("")
    _refuse_preloaded_code(str(tmp_path))
