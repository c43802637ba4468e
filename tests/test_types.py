"""The type check: mypy over the packages mypy.ini lists (hlo, graph_passes, backends/codegen) reports no
error. Run it alone with ``python -m mypy`` from the repository root (mypy.ini holds the settings).
Without mypy installed it skips, or fails when ``CI`` is set."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_checked_packages_have_no_type_errors() -> None:
    if importlib.util.find_spec("mypy") is None:
        message = "the type check needs mypy (pip install -e '.[test]')"
        if os.environ.get("CI"):  # CI installs the test extra: a missing checker is a broken setup
            pytest.fail(message)
        pytest.skip(message)
    # An incremental cache outside the tree: a rerun checks only what changed (under a second, against ~10 s cold).
    tree = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]  # one cache per checkout
    cache = Path(tempfile.gettempdir()) / f"tfxla-mypy-cache-{os.getuid()}-{tree}"
    proc = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini"),
                           "--cache-dir", str(cache)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"mypy found type errors:\n{proc.stdout}{proc.stderr}"
    assert "Success: no issues found" in proc.stdout, proc.stdout
