"""Trusting the kernel cache and the files loaded from it (``backends/kernel_cache.py``,
``backends/shared_object.py``, ``backends/cpu/runtime.py``).

* Modes: under umask 002 the cache's directories are created 0700 and its files 0600.
* A cache directory other users can write (0777, 0775) is refused with an error naming it and the fix,
  whether it is given directly or comes from ``TFXLA_CACHE_DIR`` / ``XDG_CACHE_HOME``.
* Every artifact has a sha256 record; an object planted at a cache key (the record left as it was) is
  refused naming the file, an entry without a record (an old cache) is rebuilt.
* The Python loader opens a kernel file once and loads a sealed in-memory copy of the bytes it checked
  (``inotify`` counts the opens; ``/proc/self/maps`` and the memfd's seals show what is mapped).
* ``/dev/zero``, a FIFO and a directory are refused before anything is read (a FIFO without a writer
  would block the open forever).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from backends.cpu import KernelError
from backends.toolchain import CompilerOptions, compile_shared_object
from backends.cpu.runtime import Kernel
from backends.kernel_cache import UnsafeCacheError, default_cache_dir
from backends.shared_object import LoadError, load_library, read_regular_file
from tests.file_probes import ALL_SEALS, count_opens, mapped_files, memfd_seals

REPO = Path(__file__).resolve().parent.parent
FAST = CompilerOptions(opt_flags=("-O1",), target_flags=(), openmp=False)


def _source(value: int) -> str:
    return f"int tfxla_test_value(void) {{ return {value}; }}\n"


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


@pytest.fixture
def umask_002():
    old = os.umask(0o002)
    try:
        yield
    finally:
        os.umask(old)


def test_cache_dirs_are_0700_and_files_0600_under_umask_002(tmp_path, umask_002) -> None:
    root = tmp_path / "a" / "cache"  # two missing levels
    built = compile_shared_object(_source(1), FAST, root, name="modes")
    modes = _modes(tmp_path / "a")
    dirs = {p: m for p, m in modes.items() if (tmp_path / "a" / p).is_dir()}
    files = {p: m for p, m in modes.items() if (tmp_path / "a" / p).is_file()}
    assert set(dirs.values()) == {0o700}, dirs
    assert set(files.values()) == {0o600}, files
    suffixes = {Path(p).name.removeprefix(built.key) for p in files}
    assert suffixes == {".so", ".c", ".so.sha256", ".lock"}


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_cache_dir_others_can_write_is_refused(tmp_path, mode) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)
    with pytest.raises(UnsafeCacheError) as e:
        compile_shared_object(_source(2), FAST, root, name="unsafe")
    message = str(e.value)
    assert f"kernel cache directory {root} is writable by its " in message and f"(mode {mode:04o})" in message
    assert f"chmod go-w {root}" in message
    assert list(root.iterdir()) == []  # nothing was built or written there


def test_an_unsafe_shard_dir_is_refused(tmp_path) -> None:
    built = compile_shared_object(_source(3), FAST, tmp_path, name="shard")
    os.chmod(built.path.parent, 0o777)
    with pytest.raises(UnsafeCacheError, match=f"kernel cache directory {built.path.parent} is writable"):
        compile_shared_object(_source(3), FAST, tmp_path, name="shard")


@pytest.mark.parametrize("variable", ["TFXLA_CACHE_DIR", "XDG_CACHE_HOME"])
def test_an_unsafe_cache_dir_from_the_environment_is_refused(tmp_path, monkeypatch, variable) -> None:
    monkeypatch.delenv("TFXLA_CACHE_DIR", raising=False)
    monkeypatch.setenv(variable, str(tmp_path))
    os.chmod(tmp_path, 0o777)
    root = default_cache_dir()
    with pytest.raises(UnsafeCacheError, match=f"kernel cache directory {tmp_path} is writable by its group and "
                                               f"others .*chmod go-w {tmp_path}"):
        compile_shared_object(_source(4), FAST, None, name="env")
    assert list(tmp_path.iterdir()) == []
    assert root == tmp_path if variable == "TFXLA_CACHE_DIR" else root == tmp_path / "tfxla_plugin" / "kernels"


def test_a_planted_object_at_a_cache_key_is_refused(tmp_path) -> None:
    genuine = compile_shared_object(_source(5), FAST, tmp_path, name="genuine")
    planted = compile_shared_object(_source(666), FAST, tmp_path / "elsewhere", name="planted")
    assert load_library(genuine.path, genuine.sha256).tfxla_test_value() == 5
    os.replace(planted.path, genuine.path)  # the record of the genuine object stays
    with pytest.raises(UnsafeCacheError, match=f"kernel cache entry {genuine.path} has sha256 .*, but "
                                               f"{genuine.path}.sha256 records {genuine.sha256}"):
        compile_shared_object(_source(5), FAST, tmp_path, name="genuine")
    with pytest.raises(KernelError, match=f"cannot load kernel {genuine.path}: .* has sha256 .* refusing to load"):
        Kernel(genuine.path)  # the loader checks the record too


def test_an_entry_without_a_record_is_rebuilt(tmp_path) -> None:
    first = compile_shared_object(_source(7), FAST, tmp_path, name="old")
    Path(f"{first.path}.sha256").unlink()  # as a cache written before records
    again = compile_shared_object(_source(7), FAST, tmp_path, name="old")
    assert not again.cache_hit and again.sha256 == first.sha256
    assert compile_shared_object(_source(7), FAST, tmp_path, name="old").cache_hit


def test_the_loader_opens_the_file_once_and_loads_a_sealed_copy(tmp_path) -> None:
    built = compile_shared_object(_source(8), FAST, tmp_path, name="once")
    path = tmp_path / "kernel_once_8.so"
    path.write_bytes(built.path.read_bytes())
    libs = []
    assert count_opens(path, lambda: libs.append(load_library(path))) == 1
    assert libs[0].tfxla_test_value() == 8
    maps = mapped_files()
    assert str(path) not in maps and f"/memfd:{path.name} (deleted)" in maps
    assert memfd_seals(path.name) == ALL_SEALS
    path.write_bytes(b"\x7fELF overwritten")  # the file is not what runs
    assert libs[0].tfxla_test_value() == 8


def test_distinct_contents_get_distinct_objects_and_equal_contents_one(tmp_path) -> None:
    values = {}
    for v in (9, 10, 9):
        built = compile_shared_object(_source(v), FAST, tmp_path / str(v), name=f"v{v}")
        values.setdefault(v, []).append(load_library(built.path, built.sha256))
    assert [lib.tfxla_test_value() for lib in values[9] + values[10]] == [9, 9, 10]
    assert values[9][0] is values[9][1]


def test_out_of_descriptors_the_soft_limit_is_raised_to_the_hard_one(tmp_path) -> None:
    """Each loaded object keeps its memfd: in a process at its soft limit, loading raises it (once) to the hard."""
    built = compile_shared_object(_source(12), FAST, tmp_path, name="fds")
    code = ("import os, resource, sys\nfrom backends.shared_object import load_library\n"
            "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
            "resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))\n"
            "held = []\n"
            "while True:\n    try:\n        held.append(os.open('/dev/null', os.O_RDONLY))\n"
            "    except OSError:\n        break\n"
            "print(load_library(sys.argv[1], sys.argv[2]).tfxla_test_value(), "
            "resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(built.path), built.sha256], capture_output=True, text=True,
                          timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.stdout.split() == ["12", "True"], proc.stderr[-2000:]


@pytest.mark.parametrize("kind", ["dev_zero", "fifo", "directory"])
def test_hostile_paths_are_refused_before_reading(tmp_path, kind) -> None:
    """In a fresh process with a timeout: a FIFO without a writer must not block, /dev/zero not run away."""
    path = {"dev_zero": Path("/dev/zero"), "fifo": tmp_path / "k.so", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    code = ("import sys\nfrom backends.cpu.runtime import Kernel\n"
            "try:\n    Kernel(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    what = {"dev_zero": "a character device", "fifo": "a FIFO", "directory": "a directory"}[kind]
    assert proc.stdout.strip() == f"KernelError cannot load kernel {path}: {path} is not a regular file ({what})", \
        proc.stderr[-2000:]


def test_read_regular_file_bounds_the_size(tmp_path) -> None:
    big = tmp_path / "big.so"
    with open(big, "wb") as f:
        f.truncate(1 << 20)  # sparse
    with pytest.raises(LoadError, match=f"{big} has 1048576 bytes, more than the limit of 1000"):
        read_regular_file(big, max_bytes=1000)
    assert len(read_regular_file(big)) == 1 << 20


def test_concurrent_builds_of_one_key_build_once_and_agree(tmp_path) -> None:
    results = []
    threads = [threading.Thread(target=lambda: results.append(
        compile_shared_object(_source(11), FAST, tmp_path, name="race"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(not r.cache_hit for r in results) == 1 and len({r.sha256 for r in results}) == 1
