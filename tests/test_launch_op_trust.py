"""Trusting what the TfxlaLaunch op loads (tfxla_plugin/ops/kernel_file.h, kernel_table.h, rebuild.h) and
the op library itself (tfxla_plugin/_op.py).

* The op opens a kernel file once and runs a sealed in-memory copy of the bytes it hashed (inotify
  counts the opens; /proc/self/maps and the memfd's seals show what is mapped).
* A kernel that cannot be used is rebuilt by the op running the recorded compiler itself (rebuild.h: no
  shell, no interpreter) on a checked copy of its source in a private directory; a tampered source, a
  missing or failing compiler and an old model without rebuild commands are clear errors naming the node.
* The op library's cache: a directory others can write is refused; a truncated library there (which
  used to kill every later process with SIGBUS) is found in a fresh process and rebuilt, and under
  umask 002 its directories are 0700 and its files 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from backends.kernel_cache import UnsafeCacheError
from tests.file_probes import ALL_SEALS, count_opens, mapped_files, memfd_seals
from tests.test_launch_op import COPY_SCALAR, REPO, SCALAR_SIG, _abi_kernel
from tfxla_plugin import _op


@pytest.fixture(scope="module")
def op():
    return _op.load_op_library()


def test_the_op_opens_a_kernel_once_and_runs_a_sealed_copy_of_the_bytes_it_hashed(op, tmp_path):
    path = Path(_abi_kernel(tmp_path, "opened_once", {**SCALAR_SIG, "module": "once"}, COPY_SCALAR))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    results = []
    call = dict(kernel_path=str(path), args=[np.float32(4)], Tout=[tf.float32], output_shapes=[[]], cluster="c",
                kernel_hash=sha)
    assert count_opens(path, lambda: results.append(op.tfxla_launch(**call)[0].numpy())) == 1
    assert results == [4.0]
    maps = mapped_files()
    assert str(path) not in maps and "/memfd:opened_once.so (deleted)" in maps  # not the file: its copy
    assert memfd_seals("opened_once.so") == ALL_SEALS  # which nobody can change
    path.write_bytes(b"replaced")
    assert op.tfxla_launch(**call)[0].numpy() == 4.0


GCC = ["gcc", "-shared", "-fPIC", "-O1", "{source}", "-o", "{output}"]


def _rebuild_call(shipped: Path, argv: list[str], source_sha: str, cluster: str = "rb") -> dict:
    """A launch of ``shipped`` as a wrapped model's node records it: rebuildable from ``<shipped>.c``."""
    return dict(kernel_path=str(shipped), args=[np.float32(1.5)], Tout=[tf.float32], output_shapes=[[]],
                cluster=cluster, kernel_hash="", kernel_hashes=["0" * 64], source_hashes=[source_sha],
                rebuild_commands=[json.dumps(argv)], backend="cpu", source_suffix=".c")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def unusable(tmp_path):
    """A kernel whose shipped .so is garbage beside its genuine C source (it copies its input)."""
    so = Path(_abi_kernel(tmp_path, "k_unusable", {**SCALAR_SIG, "module": "unusable"}, COPY_SCALAR))
    so.write_bytes(b"\x7fELF not the recorded object")
    return so, so.with_suffix(".c")


def test_an_unusable_kernel_is_rebuilt_by_running_its_compiler_in_a_private_directory(op, tmp_path, unusable,
                                                                                     monkeypatch, capfd):
    """The op runs the recorded argv itself (a stand-in compiler here reports what it saw, then runs gcc): in a
    new 0700 directory of this user's under $TMPDIR, on a copy of the source, which is gone afterwards; a
    second node that needs the same rebuild gets the kernel already built."""
    so, source = unusable
    report, temp = tmp_path / "report", tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    compiler = tmp_path / "cc"
    compiler.write_text(f'#!/bin/sh\nd=$(dirname "$1")\necho "$(stat -c "%a %u" "$d") $d $(ls "$d") '
                        f'$(cmp -s "$1" {source} && echo same)" >> {report}\nexec gcc -shared -fPIC "$1" -o "$2"\n')
    compiler.chmod(0o700)
    argv = [str(compiler), "{source}", "{output}"]
    assert op.tfxla_launch(**_rebuild_call(so, argv, _sha(source)))[0].numpy() == 1.5
    assert op.tfxla_launch(**_rebuild_call(so, argv, _sha(source), cluster="rb2"))[0].numpy() == 1.5
    (line,) = report.read_text().splitlines()  # compiled once
    mode, uid, directory, listed, same = line.split()
    assert (mode, int(uid), listed, same) == ("700", os.getuid(), "k_unusable.c", "same")
    assert Path(directory).parent == temp and not Path(directory).exists() and not list(temp.iterdir())
    err = capfd.readouterr().err
    assert f"tfxla: kernel '{so}' has sha256 " in err and f"rebuilt it from its source '{source}' ({compiler} " in err


def test_a_rebuild_with_gcc_gives_the_kernels_numbers(op, unusable):
    so, source = unusable
    assert op.tfxla_launch(**_rebuild_call(so, GCC, _sha(source), cluster="gcc"))[0].numpy() == 1.5


def test_a_tampered_source_is_refused_by_name_and_never_compiled(op, tmp_path, unusable):
    so, source = unusable
    recorded = _sha(source)
    source.write_text(source.read_text() + "/* changed */\n")
    marker = tmp_path / "compiled"
    argv = ["touch", str(marker), "{source}", "{output}"]
    with pytest.raises(tf.errors.DataLossError, match=re.escape(f"its source '{source}' has sha256 {_sha(source)}, "
                                                                f"not the recorded {recorded}: refusing to load or "
                                                                f"rebuild it")):
        op.tfxla_launch(**_rebuild_call(so, argv, recorded))
    assert not marker.exists()


def test_a_missing_compiler_is_a_clear_error_naming_the_node_and_the_command(op, unusable):
    so, source = unusable
    argv = ["/nonexistent/tfxla-test-cc", "-O2", "{source}", "{output}"]
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        op.tfxla_launch(**_rebuild_call(so, argv, _sha(source), cluster="nocc"))
    message = e.value.message
    assert re.search(r"TfxlaLaunch node '[^']+' \(cluster 'nocc'\): tfxla kernel '" + re.escape(str(so)), message)
    assert "cannot run '/nonexistent/tfxla-test-cc': No such file or directory" in message
    assert re.search(r"\(command: /nonexistent/tfxla-test-cc -O2 /\S+/k_unusable\.c /\S+\.so\)", message), message


def test_a_failing_compile_reports_its_exit_status_and_output(op, tmp_path, unusable):
    so, source = unusable
    source.write_text("this is not C;\n")
    with pytest.raises(tf.errors.FailedPreconditionError) as e:
        op.tfxla_launch(**_rebuild_call(so, GCC, _sha(source), cluster="broken"))
    message = e.value.message
    assert f"and rebuilding it from '{source}' failed with exit status 1: gcc -shared -fPIC -O1 " in message
    assert "error:" in message and "this is not C" in message  # gcc's stderr


def test_an_old_wrapped_model_without_rebuild_commands_is_told_to_rewrap(op, unusable):
    so, source = unusable
    call = {**_rebuild_call(so, GCC, _sha(source), cluster="old"), "rebuild_commands": [], "source_suffix": ""}
    with pytest.raises(tf.errors.FailedPreconditionError, match="wrapped by an older tfxla-plugin, which rebuilt "
                                                                "kernels through Python.*re-wrap the model"):
        op.tfxla_launch(**call)


def test_a_malformed_rebuild_command_is_refused_when_the_node_is_built(op, unusable):
    so, source = unusable
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape('rebuild command needs a program and exactly '
                                                                       'one "{source}" and one "{output}" element')):
        op.tfxla_launch(**_rebuild_call(so, ["gcc", "{source}"], _sha(source), cluster="bad"))


def test_the_op_runs_no_shell_and_no_interpreter():
    sources = {p.name: p.read_text() for p in (REPO / "tfxla_plugin" / "ops").iterdir()}
    for needle in ("popen", "system(", "TFXLA_PYTHON", "getenv(\"PYTHON", "/bin/sh", "execl", "-m tfxla_plugin"):
        assert not [name for name, text in sources.items() if needle in text], needle
    assert "posix_spawnp(" in sources["rebuild.h"]


def test_an_op_cache_dir_others_can_write_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    os.chmod(tmp_path, 0o775)
    with pytest.raises(UnsafeCacheError, match=re.escape(f"op library cache directory {tmp_path} is writable by its "
                                                         f"group (mode 0775)") + ".*" + re.escape(f"chmod go-w {tmp_path}")):
        _op.cache_path(_op.tf_build_info())


OP_CHILD = """
import os, sys
os.umask(0o002)
import tensorflow as tf
from tfxla_plugin import _op  # imports tfxla_plugin, which loads the op library
try:
    _op.load_op_library().tfxla_launch(kernel_path=sys.argv[1], args=[tf.constant(1.0)], Tout=[tf.float32],
                                       output_shapes=[[]], cluster="c", kernel_hash="")
except tf.errors.NotFoundError as e:
    print("the op runs:", e.message.split("}} ")[-1].split(" [Op:")[0])
"""


@pytest.mark.slow
def test_a_truncated_op_library_in_the_cache_is_found_and_rebuilt(op, tmp_path, monkeypatch):
    """A fresh process (umask 002) whose cache holds the op library cut in half: it says so and rebuilds it
    (one build, seconds), where loading it used to die of SIGBUS in every process; dirs 0700, files 0600."""
    info = _op.tf_build_info()
    if _op.packaged_library(info) is not None:
        pytest.skip("an installed op library is used before the cache")
    good = _op.cache_path(info)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    so = _op.cache_path(info)
    data = good.read_bytes()
    so.write_bytes(data[: len(data) // 2])
    shutil.copy(good.with_suffix(".json"), so.with_suffix(".json"))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", OP_CHILD, str(tmp_path / "missing.so")], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"tfxla: the cached TfxlaLaunch op library {so} is unusable (truncated ELF file ({len(data) // 2} bytes)" \
        in proc.stderr and "; rebuilding it" in proc.stderr
    assert proc.stdout.strip() == f"the op runs: tfxla kernel file '{tmp_path / 'missing.so'}' not found: No such " \
                                  f"file or directory"
    assert _op.library_bytes(so)[0] is not None
    modes = {p.relative_to(tmp_path): stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "tfxla_plugin").rglob("*")}
    assert {m for p, m in modes.items() if (tmp_path / p).is_dir()} == {0o700}, modes
    assert {m for p, m in modes.items() if (tmp_path / p).is_file()} == {0o600}, modes
    assert {p.suffix for p in modes if (tmp_path / p).is_file()} == {".so", ".json", ".lock"}
