"""Shared pytest setup: quiet TensorFlow's C++ logging before any test imports it, and a directory shared
by every worker process of one run (pytest-xdist: tests/README.md)."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session")
def run_tmp_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This run's base temporary directory, the same in every worker of the run (under xdist each
    worker's own base is ``<run's base>/popen-gwN``): what is built here (a kernel cache: its file locks
    make concurrent builds of one key run the compiler once) is built once for the whole run."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
