"""Packaging: pyproject.toml, the LICENSE, the in-tree build backend (wheel, sdist, its refusals), and the
messages for missing optional packages.

TensorFlow and TensorBoard are optional dependencies (pyproject.toml says why); the subprocess cases block
one of them with ``sys.modules[name] = None`` (what ``import`` then reports as not installed) and check the
ImportError / CLI message names what to install, and that nothing was written.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tarfile
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
    assert PYPROJECT["tool"]["tfxla-build"]["version"] == "tfxla_plugin/_version.py"
    assert PROJECT["requires-python"] == ">=3.11"
    # The in-tree backend: nothing to fetch to build (offline, and any installed setuptools or none).
    assert PYPROJECT["build-system"] == {"requires": [], "build-backend": "tfxla_build",
                                         "backend-path": ["build_backend"]}


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


_HOOK = "import json, sys; sys.path.insert(0, 'build_backend'); import tfxla_build\n" \
        "print(getattr(tfxla_build, sys.argv[1])(sys.argv[2], json.loads(sys.argv[3])))"


def _hook(hook: str, out: Path, source: Path = ROOT, config: dict | None = None) -> subprocess.CompletedProcess:
    """The in-tree backend's ``hook`` run in ``source`` as pip runs it (a fresh interpreter, cwd = the tree)."""
    out.mkdir(parents=True, exist_ok=True)
    return subprocess.run([sys.executable, "-c", _HOOK, hook, str(out), json.dumps(config or {})], cwd=source,
                          capture_output=True, text=True, timeout=120)


def _build(hook: str, out: Path, source: Path = ROOT, config: dict | None = None) -> Path:
    proc = _hook(hook, out, source, config)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out / proc.stdout.split()[-1]


def test_wheel_has_the_sources_and_the_metadata(tmp_path):
    """``pip wheel .`` in pip's isolated build environment (no TensorFlow there, nothing fetched): a pure
    wheel with every tracked module, the op's C++ sources, the license and PEP 621 metadata."""
    from tfxla_plugin import _op

    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-cache-dir", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    assert wheel.name == f"tfxla_plugin-{__version__}-py3-none-any.whl"
    dist_info = f"tfxla_plugin-{__version__}.dist-info"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(f"{dist_info}/METADATA").decode()
        entry_points = z.read(f"{dist_info}/entry_points.txt").decode()
        wheel_file = z.read(f"{dist_info}/WHEEL").decode()
        record = z.read(f"{dist_info}/RECORD").decode()
    ops = _op.SOURCE.parent
    op_sources = {f"tfxla_plugin/ops/{p.name}" for p in [*ops.glob("*.cc"), *ops.glob("*.h")]}
    assert op_sources | {"tfxla_plugin/hook/graph_optimizer.cc", f"{dist_info}/licenses/LICENSE"} <= names
    assert not any(n.endswith(".so") or n.startswith(("tests/", "bench/", "build_backend/")) for n in names)
    if (ROOT / ".git").exists() and shutil.which("git"):
        tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True).stdout.split()
        packaged = {p for p in tracked if p.split("/")[0] in PYPROJECT["tool"]["tfxla-build"]["packages"]}
        assert packaged <= names, sorted(packaged - names)
    assert "Root-Is-Purelib: true" in wheel_file and "Tag: py3-none-any" in wheel_file
    assert set(record.splitlines()[-1].split(",")) == {f"{dist_info}/RECORD", ""}
    assert len(record.splitlines()) == len(names)
    head = meta.partition("\n\n")[0].splitlines()
    assert {"Metadata-Version: 2.4", "Name: tfxla-plugin", f"Version: {__version__}", "License-Expression: Apache-2.0",
            "License-File: LICENSE", "Requires-Python: >=3.11", "Provides-Extra: cpu"} <= set(head)
    cpu = [Requirement(line.removeprefix("Requires-Dist: ")) for line in head if "tensorflow-cpu" in line]
    assert [(r.name, str(r.specifier), str(r.marker)) for r in cpu] == \
        [("tensorflow-cpu", "<2.22,>=2.21", 'extra == "cpu"')]
    assert meta.partition("\n\n")[2] == (ROOT / "README.md").read_text()
    assert "[console_scripts]\ntfxla = tfxla_plugin.cli:main" in entry_points


def test_sdist_builds_the_same_wheel(tmp_path):
    """The sdist carries the backend and everything the wheel ships; a wheel built from it has the same files."""
    direct = _build("build_wheel", tmp_path / "direct", ROOT, {"op": "skip"})
    sdist = _build("build_sdist", tmp_path / "sdist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    (tree,) = (tmp_path / "unpacked").iterdir()
    pkg_info = (tree / "PKG-INFO").read_text()
    assert pkg_info.startswith(f"Metadata-Version: 2.4\nName: tfxla-plugin\nVersion: {__version__}\n")
    rebuilt = _build("build_wheel", tmp_path / "rebuilt", tree, {"op": "skip"})
    with zipfile.ZipFile(direct) as a, zipfile.ZipFile(rebuilt) as b:
        assert a.namelist() == b.namelist()
        assert [a.read(n) for n in a.namelist()] == [b.read(n) for n in b.namelist()]


def test_bad_op_setting_is_refused(tmp_path):
    proc = _hook("build_wheel", tmp_path, config={"op": "yes"})
    assert proc.returncode == 1, proc
    assert "BackendError: config setting op='yes': expected one of auto, skip, build" in proc.stderr
    assert not list(tmp_path.iterdir())


def _backend():
    spec = importlib.util.spec_from_file_location("tfxla_build", ROOT / "build_backend" / "tfxla_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_TOY = """
[project]
name = "Toy.Pkg"
version = "1.2"
{extra}
[project.optional-dependencies]
Old_Python = ["tomli>=2; python_version < '3.11'"]
[tool.tfxla-build]
packages = ["toy"]
package-data = {{toy = ["{data}"]}}
"""


def _toy(tmp_path: Path, extra: str = "", data: str = "*.h") -> Path:
    (tmp_path / "toy" / "sub").mkdir(parents=True)
    (tmp_path / "toy" / "nodir").mkdir()
    for name in ("toy/__init__.py", "toy/sub/__init__.py", "toy/sub/m.py", "toy/nodir/stray.py", "toy/k.h"):
        (tmp_path / name).write_text("")
    (tmp_path / "pyproject.toml").write_text(_TOY.format(extra=extra, data=data))
    return tmp_path


def test_backend_metadata_and_files_of_a_toy_project(tmp_path):
    backend = _backend()
    project = backend.Project(_toy(tmp_path))
    assert project.dist == "toy_pkg-1.2"
    assert project.package_files() == ["toy/__init__.py", "toy/k.h", "toy/sub/__init__.py", "toy/sub/m.py"]
    meta = backend.core_metadata(project).splitlines()
    assert "Provides-Extra: old-python" in meta  # PEP 685 normalization
    (line,) = [m for m in meta if m.startswith("Requires-Dist: ")]
    requirement = Requirement(line.removeprefix("Requires-Dist: "))
    assert requirement.name == "tomli" and str(requirement.specifier) == ">=2"
    assert requirement.marker.evaluate({"extra": "old-python", "python_version": "3.10"})
    assert not requirement.marker.evaluate({"extra": "old-python", "python_version": "3.11"})
    assert not requirement.marker.evaluate({"extra": "", "python_version": "3.10"})


@pytest.mark.parametrize("extra, data, message", [
    ('homepage = "x"', "*.h", "pyproject.toml [project] ['homepage']: not supported by tfxla_build.py"),
    ('license = {text = "MIT"}', "*.h", "pyproject.toml license: write an SPDX expression (PEP 639), not a table"),
    ("", "*.cc", "[tool.tfxla-build] package-data: toy/*.cc matches no file"),
])
def test_backend_refuses_what_it_cannot_write(tmp_path, extra, data, message):
    backend = _backend()
    with pytest.raises(backend.BackendError) as e:
        project = backend.Project(_toy(tmp_path, extra, data))
        backend.core_metadata(project)
        project.package_files()
    assert str(e.value) == message
