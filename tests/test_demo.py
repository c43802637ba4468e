"""The README's main job, ``python -m tfxla_plugin.demo``, on one sample model (the MLP): it exits 0,
every result matches TensorFlow, and it prints the two SavedModel tables (the wrapped model at TF's
default threads, and the compiled signature)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_the_main_job_demo_runs_and_everything_matches() -> None:
    proc = subprocess.run([sys.executable, "-m", "tfxla_plugin.demo", "--models", "mlp"], capture_output=True,
                          text=True, timeout=900, cwd=Path(__file__).resolve().parents[1],
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert "matches NumPy: True" in out and "results match TensorFlow: True" in out
    assert "wrapped SavedModels match the originals at batch 1, 3 and 8: True" in out
    assert "Wrapped SavedModels at TensorFlow's default threads" in out and "tfxla_plugin.function(loaded.signatures[...])" in out
    table = out.split("tfxla_plugin.function(loaded.signatures[...])")[1]
    rows = [line.split() for line in table.splitlines() if line.startswith("mlp ")]
    assert [r[1] for r in rows] == ["1", "8"] and all(r[-1] == "True" for r in rows), table
