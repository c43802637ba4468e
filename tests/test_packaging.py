"""Packaging: pyproject.toml's metadata, the LICENSE, the wheel, and the messages for missing optional packages.

TensorFlow and TensorBoard are optional dependencies (pyproject.toml says why); the subprocess cases block
one of them with ``sys.modules[name] = None`` (what ``import`` then reports as not installed) and check the
ImportError / CLI message names what to install, and that nothing was written.
"""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tfxla_plugin._version import __version__

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]


def _extra(name: str) -> dict[str, Requirement]:
    return {r.name: r for r in map(Requirement, PROJECT["optional-dependencies"][name])}


def test_metadata_version_is_read_from_version_module():
    assert PROJECT["name"] == "tfxla-plugin"
    assert PROJECT["dynamic"] == ["version"] and "version" not in PROJECT
    attr = PYPROJECT["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    module, _, name = attr.rpartition(".")
    assert getattr(importlib.import_module(module), name) == __version__
    assert PROJECT["requires-python"] == ">=3.11"
    assert PYPROJECT["build-system"]["build-backend"] == "setuptools.build_meta"


def test_tensorflow_is_an_extra_with_the_supported_range():
    assert not any(Requirement(r).name.startswith("tensorflow") for r in PROJECT["dependencies"])
    for extra, package in (("cpu", "tensorflow-cpu"), ("tensorflow", "tensorflow")):
        spec = _extra(extra)[package].specifier
        assert spec.contains("2.21.0") and spec.contains("2.21.7"), (extra, spec)
        assert not spec.contains("2.20.1") and not spec.contains("2.22.0"), (extra, spec)
    assert _extra("tensorboard")["tensorboard"].specifier.contains("2.21.0")
    assert "tensorboard" in _extra("test") and "pytest" in _extra("test")
    assert "pycuda" in _extra("cuda")


def test_script_and_license():
    module, _, func = PROJECT["scripts"]["tfxla"].partition(":")
    assert callable(getattr(importlib.import_module(module), func))
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert "END OF TERMS AND CONDITIONS" in text and len(text.splitlines()) > 190


def test_build_artefacts_are_not_tracked():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert not [p for p in tracked.splitlines() if ".egg-info" in p or p.startswith(("build/", "dist/"))]


_NO_TENSORFLOW = """
import sys
sys.modules["tensorflow"] = None
import tfxla_plugin
from tfxla_plugin import cli
assert tfxla_plugin.__version__
try:
    tfxla_plugin.function
except ImportError as e:
    print("ERROR", type(e).__name__, e)
sys.exit(cli.main(["wrap", "--dir", sys.argv[1], "--output_dir", sys.argv[2]]))
"""


def test_missing_tensorflow_names_the_package_to_install(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _NO_TENSORFLOW, str(tmp_path / "in"), str(tmp_path / "out")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("ERROR MissingDependencyError tfxla_plugin.function needs TensorFlow, "
                                  'which is not installed: pip install "tensorflow-cpu==2.21.*"'), proc
    assert proc.returncode == 1, proc
    assert 'tfxla wrap: this command needs TensorFlow, which is not installed: pip install "tensorflow-cpu==2.21.*"' \
        in proc.stderr, proc.stderr


_NO_TENSORBOARD = """
import sys
sys.modules["tensorboard"] = None
from tfxla_plugin import cli, tensorboard
try:
    tensorboard.write_graph_def(None, sys.argv[2], "f")
except ImportError as e:
    print("ERROR", type(e).__name__, e)
sys.exit(cli.main(["tensorboard", "--dir", sys.argv[1], "--logdir", sys.argv[2]]))
"""


def test_tfxla_tensorboard_without_tensorboard_says_what_to_install_and_writes_nothing(tmp_path):
    logdir = tmp_path / "logs"
    proc = subprocess.run([sys.executable, "-c", _NO_TENSORBOARD, str(ROOT / "saved_models"), str(logdir)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stdout.startswith("ERROR MissingDependencyError tfxla_plugin.tensorboard needs the tensorboard "
                                  'package, which is not installed: pip install "tensorboard==2.21.*"'), proc
    assert proc.returncode == 1, proc
    assert "tfxla tensorboard: this command needs the tensorboard package, which is not installed: " \
           'pip install "tensorboard==2.21.*"' in proc.stderr, proc.stderr
    assert f"nothing was written to {logdir}" in proc.stderr
    assert not logdir.exists()


def _can_build_wheels(scratch: Path) -> str | None:
    """Why a wheel cannot be built here (pip needs setuptools>=77 from an index for build isolation), or None."""
    probe = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(scratch),
                            "--only-binary=:all:", "setuptools>=77"], capture_output=True, text=True, timeout=120)
    return None if probe.returncode == 0 else f"no index with setuptools>=77 reachable: {probe.stderr[-300:]}"


@pytest.mark.slow
def test_wheel_builds_with_the_metadata(tmp_path):
    reason = _can_build_wheels(tmp_path / "probe")
    if reason:
        pytest.skip(reason)
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "*.egg-info", "build", "dist", "__pycache__",
                                                              ".pytest_cache", ".hypothesis", ".mypy_cache",
                                                              "_tfxla_launch_op*", "out"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "whl"),
                           str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "whl").glob("*.whl")
    assert wheel.name == f"tfxla_plugin-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"tfxla_plugin-{__version__}.dist-info/METADATA").decode()
        entry_points = z.read(f"tfxla_plugin-{__version__}.dist-info/entry_points.txt").decode()
    assert f"tfxla_plugin-{__version__}.dist-info/licenses/LICENSE" in names
    assert {"tfxla_plugin/ops/tfxla_launch.cc", "tfxla_plugin/hook/graph_optimizer.cc", "hlo/__init__.py",
            "backends/__init__.py", "graph_passes/__init__.py"} <= names
    assert not any(n.startswith("tests/") for n in names)
    assert "License-Expression: Apache-2.0" in meta and "Requires-Python: >=3.11" in meta
    assert 'Requires-Dist: tensorflow-cpu<2.22,>=2.21; extra == "cpu"' in meta
    assert "tfxla = tfxla_plugin.cli:main" in entry_points
