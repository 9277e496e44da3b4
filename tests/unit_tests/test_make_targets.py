"""What the Makefile's targets run (dry runs: ``make -n``, nothing is executed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def dry_run(*targets: str, fresh: bool = False) -> list[str]:
    """The commands ``make`` would run; the virtualenv counts as installed unless ``fresh``."""
    args = ["make", "-n", "-C", str(ROOT), "VENV=.venv-dry-run"]
    args += ["-B"] if fresh else ["-o", ".venv-dry-run/.installed"]
    done = subprocess.run([*args, *targets], capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.splitlines()


def test_bench_leaves_the_readme_alone_and_bench_readme_updates_it() -> None:
    bench = [line for line in dry_run("bench") if "histcompress bench" in line]
    assert len(bench) == 1 and "README" not in bench[0] and "--out bench-out" in bench[0]
    readme = [line for line in dry_run("bench-readme") if "histcompress bench" in line]
    assert len(readme) == 1 and "--readme README.md" in readme[0]
    assert "--docs docs/benchmark.md" in readme[0]


def test_test_target_builds_the_docs_strictly_and_installs_their_extra() -> None:
    assert any("mkdocs build --strict" in line for line in dry_run("test"))
    assert any("mkdocs build --strict" in line for line in dry_run("docs"))
    pip = [line for line in dry_run("demo", fresh=True) if "pip install -q -e" in line]
    assert len(pip) == 1 and "docs" in pip[0].split("[")[1]


def test_test_target_prints_skip_reasons() -> None:
    runs = [line for line in dry_run("test") if "bin/pytest" in line]
    assert len(runs) == 2
    assert all(" -rs" in line for line in runs)


def test_first_install_says_what_it_is_doing() -> None:
    lines = dry_run("demo", fresh=True)
    pip = next(i for i, line in enumerate(lines) if "pip install -q -e" in line)
    assert any(line.startswith("echo ") and "1-2 minutes" in line for line in lines[:pip])
