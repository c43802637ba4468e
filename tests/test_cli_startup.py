"""``tfxla --help`` / ``--version`` / ``tfxla <cmd> --help`` answer without importing TensorFlow, fast.

Each case runs the command line in a fresh interpreter (as the ``tfxla`` console script does) and
prints whether ``tensorflow`` got imported; the timed case takes the median of three runs against a
generous bound (the CI machine is loaded), where importing TensorFlow alone takes several seconds.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

import pytest

from tfxla_plugin._version import __version__
from tfxla_plugin.commands import COMMANDS

_RUN_CLI = """
import sys
from tfxla_plugin import cli
try:
    code = cli.main(sys.argv[1:])
except SystemExit as e:
    code = e.code
print("tensorflow imported:", "tensorflow" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


def _cli(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _RUN_CLI, *argv], capture_output=True, text=True, timeout=120)
    return proc, time.perf_counter() - start


@pytest.mark.parametrize("argv, expected", [(("--help",), "usage: tfxla"), (("--version",), f"tfxla-plugin {__version__}")])
def test_top_level_answers_fast_without_tensorflow(argv, expected):
    runs = [_cli(*argv) for _ in range(3)]
    for proc, _ in runs:
        assert proc.returncode == 0, proc.stderr
        assert expected in proc.stdout
        assert "tensorflow imported: False" in proc.stderr
    median = statistics.median(seconds for _, seconds in runs)
    assert median < 1.0, f"tfxla {' '.join(argv)} took {median:.2f} s (median of 3)"


@pytest.mark.parametrize("command", COMMANDS)
def test_subcommand_help_does_not_import_tensorflow(command):
    proc, _ = _cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert f"usage: tfxla {command}" in proc.stdout
    assert "tensorflow imported: False" in proc.stderr


def test_import_then_tensorflow_registers_the_op():
    """The package registers TfxlaLaunch and its gradient when TensorFlow is imported after it (the hook)."""
    code = ("import sys, tfxla_plugin; assert 'tensorflow' not in sys.modules\n"
            "import tensorflow as tf\n"
            "from tensorflow.python.framework import op_def_registry\n"
            "from tensorflow.python.framework import ops\n"
            "print('registered:', op_def_registry.get('TfxlaLaunch') is not None)\n"
            "print('gradient:', ops.gradient_registry.lookup('TfxlaLaunch') is not None)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "registered: True" in proc.stdout and "gradient: True" in proc.stdout


def test_loading_the_op_before_tensorflow_is_imported_returns():
    """``_op.load_op_library()`` called before any ``import tensorflow`` returns the library: importing TF
    inside it runs the package's post-import hook, which loads the library too (once a re-entry on the
    load-once lock that waited forever)."""
    code = ("import sys; from tfxla_plugin import _op; assert 'tensorflow' not in sys.modules\n"
            "lib = _op.load_op_library()\n"
            "print('op:', hasattr(lib, 'tfxla_launch'))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "op: True" in proc.stdout
