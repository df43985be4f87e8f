"""The wheels `make dist` builds, built the same way for the tests that install them (one build at a time).

setuptools builds in each project's directory (`build/`, `*.egg-info`), so two builds at once (xdist workers)
collide: every build here holds one lock file, and leaves the tree as it found it.
"""

from __future__ import annotations

import fcntl
import pathlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
RUNTIME, CONSTRUCTS = ROOT / "packages" / "jobfence", ROOT / "packages" / "jobfence-cdk"
ALL = (RUNTIME, CONSTRUCTS, ROOT)  # ROOT: jobfence-ops (the root pyproject.toml)
LOCK = pathlib.Path(tempfile.gettempdir()) / "jobfence-wheels.lock"


def build_wheels(dist: pathlib.Path, projects: Sequence[pathlib.Path] = ALL) -> list[pathlib.Path]:
    """Build the projects' wheels into `dist` (no dependencies, no isolation: as `make dist`); their paths."""
    dist.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                            "--no-build-isolation", "-w", str(dist), *map(str, projects)], check=True,
                           capture_output=True)
        finally:
            for project in projects:
                shutil.rmtree(project / "build", ignore_errors=True)
                for info in project.glob("*.egg-info"):
                    shutil.rmtree(info, ignore_errors=True)
    wheels = sorted(dist.glob("*.whl"))
    assert len(wheels) == len(projects), wheels
    return wheels
