"""The built wheel installed as a user installs it: ``pip wheel .``, then ``pip install`` into a fresh venv.

The venv is made with ``--system-site-packages`` (TensorFlow, numpy and oneDNN are not installed again) and
without its own pip (the interpreter's pip, run by the venv's python, installs into the venv); the
wheel is installed with ``--no-deps --no-index``, so nothing is downloaded. Every command then runs in
the venv from a directory outside the repository, without ``PYTHONPATH``, so it imports the installed
copy. The pure wheel builds its op on first use into the user cache, where the suite's own runs built
it already (same sources, same command); the wheel built with TensorFlow importable carries the op,
which its first use loads without building (checked with an empty op cache).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tfxla_plugin._version import __version__

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def readme_example() -> str:
    """The first Python block of README.md's "Using it" section."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("\n## Using it\n"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def build_wheel(out: Path, *pip_args: str, env: dict | None = None) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index", "--no-cache-dir", "-q",
                           *pip_args, "-w", str(out), str(ROOT)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return wheel


class Venv:
    """A fresh ``--system-site-packages`` venv under ``root`` with ``wheel`` installed in it."""

    def __init__(self, root: Path, wheel: Path):
        self.root, self.cwd = root / "venv", root / "elsewhere"
        self.cwd.mkdir()
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(self.root)],
                       check=True, timeout=120)
        self.python = self.root / "bin" / "python"
        proc = self.run(str(self.python), "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", "-q",
                        str(wheel))
        assert proc.returncode == 0, proc.stderr[-3000:]

    def run(self, *argv: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
        environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
        environ.update({"TF_CPP_MIN_LOG_LEVEL": "2", **(env or {})})
        return subprocess.run(argv, cwd=self.cwd, env=environ, capture_output=True, text=True, timeout=timeout)

    def python_code(self, code: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return self.run(str(self.python), "-c", code, env=env)


_CHECK_EXAMPLE = """
import numpy as np
print("module:", tfxla_plugin.__file__)
print("max |compiled - tf|:", float(np.max(np.abs(y.numpy() - step.python_function(x, w).numpy()))))
print("ops:", sorted({op.type for op in step.get_concrete_function(x, w).graph.get_operations()}))
"""


def test_installed_wheel_runs_the_readme_example(tmp_path):
    wheel = build_wheel(tmp_path / "dist")
    venv = Venv(tmp_path, wheel)
    tfxla = str(venv.root / "bin" / "tfxla")

    version = venv.run(tfxla, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"tfxla-plugin {__version__}", version
    runs = []
    for _ in range(3):  # the installed console script, as a user types it
        start = time.perf_counter()
        proc = venv.run(tfxla, "--help")
        runs.append(time.perf_counter() - start)
        assert proc.returncode == 0 and proc.stdout.startswith("usage: tfxla"), proc
    assert statistics.median(runs) < 1.0, f"tfxla --help took {statistics.median(runs):.2f} s (median of 3)"

    proc = venv.python_code(readme_example() + _CHECK_EXAMPLE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    module = Path(re.search(r"^module: (.*)$", proc.stdout, re.M).group(1)).resolve()
    assert module.is_relative_to(venv.root.resolve()) and not module.is_relative_to(ROOT), module
    assert "Clustering summary: 1 cluster(s) built" in proc.stdout, proc.stdout[:2000]
    assert float(re.search(r"^max \|compiled - tf\|: (.*)$", proc.stdout, re.M).group(1)) <= 1e-5
    assert "'TfxlaLaunch'" in re.search(r"^ops: (.*)$", proc.stdout, re.M).group(1)


_LOAD_OP = """
import tfxla_plugin, tensorflow  # importing TensorFlow loads the op (the package's import hook)
from tfxla_plugin import _op
print("op function:", callable(_op.load_op_library().tfxla_launch))
print("packaged:", _op.packaged_library(_op.tf_build_info()))
"""


_COPY_COMPILER = """#!{python}
import shutil, sys
shutil.copyfile({library!r}, sys.argv[sys.argv.index("-o") + 1])
"""


def test_wheel_built_with_tensorflow_carries_the_op(tmp_path):
    """``--no-build-isolation`` where TensorFlow is importable: the op is built into a platform wheel,
    and the installed package loads it without building one (its op cache stays empty).

    The compiler (``$CXX``) is a stand-in that copies the library the user cache holds for these sources
    and this command (built here if missing): the compile is the one every first use runs, and the
    suite's time is kept for what this test is about."""
    from tfxla_plugin import _op

    library, _ = _op.cached_library(_op.tf_build_info())
    compiler = tmp_path / "copy-cxx"
    compiler.write_text(_COPY_COMPILER.format(python=sys.executable, library=str(library)))
    compiler.chmod(0o755)
    wheel = build_wheel(tmp_path / "dist", "--no-build-isolation", env={"CXX": str(compiler)})
    assert re.fullmatch(rf"tfxla_plugin-{re.escape(__version__)}-py3-none-linux_\w+\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as z:
        assert {"tfxla_plugin/_tfxla_launch_op.so", "tfxla_plugin/_tfxla_launch_op.json"} <= set(z.namelist())
        assert z.getinfo("tfxla_plugin/_tfxla_launch_op.so").external_attr >> 16 == 0o100755
        assert "Root-Is-Purelib: false" in z.read(f"tfxla_plugin-{__version__}.dist-info/WHEEL").decode()
    venv = Venv(tmp_path, wheel)
    cache = tmp_path / "cache"
    proc = venv.python_code(_LOAD_OP, env={"XDG_CACHE_HOME": str(cache)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "op function: True" in proc.stdout, proc.stdout
    packaged = Path(re.search(r"^packaged: (.*)$", proc.stdout, re.M).group(1))
    assert packaged.resolve().is_relative_to(venv.root.resolve()), packaged
    assert not (cache / "tfxla_plugin" / "ops").exists(), list(cache.rglob("*"))
