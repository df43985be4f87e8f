"""The CLI as an operator runs it, in-process, against the background runtime of a test.

`serving(runtime, directory)` serves the session's shared runtime through the
same `Daemon` that `jobfence local up` runs in a process of its own
(tests/sim/test_local_up.py starts that one), from a thread, and writes its
state file: `--local` commands and `local advance` / `kill-worker` reach it.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import threading
from typing import Iterator

from rich.console import Console

from jobfence_ops.cli import main
from jobfence_ops.local.daemon import Daemon
from jobfence_ops.runtime.runtime import LocalRuntime


@contextlib.contextmanager
def serving(runtime: LocalRuntime, directory: pathlib.Path) -> Iterator[Daemon]:
    daemon = Daemon(runtime, directory)
    thread = threading.Thread(target=daemon.server.serve_forever, daemon=True)
    thread.start()
    daemon.write_state()
    try:
        yield daemon
    finally:
        daemon.close()
        thread.join(timeout=10)


def cli(*argv: str) -> tuple[int, str]:
    """One `jobfence ...` command: its exit status and everything it printed (errors too)."""
    out = io.StringIO()
    code = main(list(argv), console=Console(file=out, width=200, color_system=None))
    return code, out.getvalue()
