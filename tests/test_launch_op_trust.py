"""Trusting what the TfxlaLaunch op loads (tfxla_plugin/ops/kernel_file.h, kernel_table.h, rebuild.h) and
the op library itself (tfxla_plugin/_op.py).

* The op opens a kernel file once and runs a sealed in-memory copy of the bytes it hashed (inotify
  counts the opens; /proc/self/maps and the memfd's seals show what is mapped).
* A rebuilt kernel (the path rebuild.h's helper prints; a stand-in helper here) is loaded only if its
  bytes match the hash record its cache wrote; a planted object is refused by name.
* The op library's cache: a directory others can write is refused; a truncated library there (which
  used to kill every later process with SIGBUS) is found in a fresh process and rebuilt, and under
  umask 002 its directories are 0700 and its files 0600.
"""

from __future__ import annotations

import hashlib
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


@pytest.fixture
def rebuild_helper(tmp_path, monkeypatch):
    """A stand-in for `python -m tfxla_plugin.rebuild_kernel`: prints the path in $TFXLA_TEST_REBUILT."""
    script = tmp_path / "fake_python"
    script.write_text('#!/bin/sh\nprintf "%s\\n" "$TFXLA_TEST_REBUILT"\n')
    script.chmod(0o700)
    monkeypatch.setenv("TFXLA_PYTHON", str(script))
    return lambda path: monkeypatch.setenv("TFXLA_TEST_REBUILT", str(path))


def test_a_rebuilt_kernel_is_loaded_only_if_it_matches_its_hash_record(op, tmp_path, rebuild_helper, capfd):
    shipped, source = tmp_path / "k_shipped.so", tmp_path / "k_shipped.c"
    shipped.write_bytes(b"\x7fELF not the recorded object")
    source.write_text("/* the kernel's source */\n")
    (tmp_path / "cache").mkdir()
    genuine = Path(_abi_kernel(tmp_path / "cache", "genuine", {**SCALAR_SIG, "module": "genuine"}, COPY_SCALAR))
    planted = Path(_abi_kernel(tmp_path, "planted", {**SCALAR_SIG, "module": "planted"},
                               "*(float*)out[0] = 666; return 0;"))
    call = dict(kernel_path=str(shipped), args=[np.float32(1)], Tout=[tf.float32], output_shapes=[[]],
                cluster="rb", kernel_hash="", kernel_hashes=["0" * 64],
                source_hashes=[hashlib.sha256(source.read_bytes()).hexdigest()])
    rebuild_helper(planted)  # no record at all
    with pytest.raises(tf.errors.DataLossError, match=re.escape(f"rebuilt tfxla kernel '{planted}' has no usable "
                                                                f"hash record")):
        op.tfxla_launch(**call)
    genuine_sha = hashlib.sha256(genuine.read_bytes()).hexdigest()
    Path(f"{planted}.sha256").write_text(f"{genuine_sha}  {planted.name}\n")  # planted at the genuine's key
    with pytest.raises(tf.errors.DataLossError, match=re.escape(f"'{planted}' has sha256 "
                                                                f"{hashlib.sha256(planted.read_bytes()).hexdigest()}, "
                                                                f"not the recorded {genuine_sha} in its hash record "
                                                                f"'{planted}.sha256'")):
        op.tfxla_launch(**call)
    Path(f"{genuine}.sha256").write_text(f"{genuine_sha}  {genuine.name}\n")
    rebuild_helper(genuine)
    assert op.tfxla_launch(**call)[0].numpy() == 1.0
    assert f"rebuilt it from its C source into '{genuine}'" in capfd.readouterr().err


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
