"""The kernel cache's size limit (``backends/cache_usage.py``) and ``tfxla cache info|clear``.

* A hit marks its entry used (the record's mtime); eviction removes the least recently used entries
  until the cache fits, and an evicted entry is simply rebuilt.
* Eviction skips entries used in the last ``min_idle`` seconds, entries whose key lock another process
  holds (a build, or a hit being checked) and temporary files being written.
* A reader hitting one entry while another thread evicts everything sees a whole entry or none: every
  call returns an artifact matching its record (hit or rebuilt), never an error.
* ``clear`` empties a cache and refuses a directory that is not one, removing nothing; the CLI prints
  location, entries, total and limit.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from backends import cache_usage
from backends.cache_usage import NotACacheError
from backends.toolchain import CompilerOptions, compile_shared_object
from tfxla_plugin.flags import Flags

FAST = CompilerOptions(opt_flags=("-O1",), target_flags=(), openmp=False)


def _source(value: int) -> str:
    return f"int tfxla_lru_value(void) {{ return {value}; }}\n"


def _build(root: Path, value: int):
    return compile_shared_object(_source(value), FAST, root, name="lru")


def _age(built, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(f"{built.path}.sha256", (t, t))


def test_a_hit_marks_use_and_eviction_removes_the_least_recently_used(tmp_path) -> None:
    a, b, c = (_build(tmp_path, v) for v in (1, 2, 3))
    for built, age in ((a, 300), (b, 200), (c, 100)):
        _age(built, age)
    assert _build(tmp_path, 1).cache_hit  # a is now the most recently used
    sizes = {e.key: e.size for e in cache_usage.usage(tmp_path).entries}
    assert [e.key for e in cache_usage.usage(tmp_path).entries] == [b.key, c.key, a.key]
    removed = cache_usage.evict(tmp_path, sizes[a.key] + sizes[c.key], min_idle=0)
    assert [e.key for e in removed] == [b.key]
    assert not b.path.exists() and not Path(f"{b.path}.sha256").exists() and not b.source_path.exists()
    assert a.path.exists() and c.path.exists()
    assert cache_usage.usage(tmp_path).total_bytes == sizes[a.key] + sizes[c.key]
    again = _build(tmp_path, 2)
    assert not again.cache_hit and again.path.exists()  # evicted entries are rebuilt


def test_eviction_keeps_recent_held_kept_and_in_progress_entries(tmp_path) -> None:
    a, b, c, d = (_build(tmp_path, v) for v in (4, 5, 6, 7))
    for built in (a, b, c):
        _age(built, 3600)
    partial = a.path.parent / ".lru.tmpwrite.so"  # a build writing its output
    partial.write_bytes(b"\0" * 100)
    lock = os.open(a.path.parent / f"{a.key}.lock", os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_SH)  # a reader checking a hit right now
    try:
        removed = cache_usage.evict(tmp_path, 1, keep={b.key})  # default min_idle keeps d (just built)
    finally:
        os.close(lock)
    assert [e.key for e in removed] == [c.key]
    assert a.path.exists() and b.path.exists() and d.path.exists() and partial.exists()
    assert cache_usage.evict(tmp_path, 0, min_idle=0) == []  # 0: no limit


def test_a_reader_sees_a_whole_entry_or_none_while_another_thread_evicts(tmp_path) -> None:
    _build(tmp_path, 8)
    stop, errors, outcomes = threading.Event(), [], []

    def evictor() -> None:
        while not stop.is_set():
            try:
                cache_usage.evict(tmp_path, 1, min_idle=0)
            except Exception as e:  # noqa: BLE001  (reported below)
                errors.append(e)

    thread = threading.Thread(target=evictor)
    thread.start()
    try:
        for _ in range(40):
            try:
                built = _build(tmp_path, 8)
                outcomes.append(built.cache_hit)
                assert len(built.sha256) == 64
            except Exception as e:  # noqa: BLE001
                errors.append(e)
            time.sleep(0.01)  # lets the evictor run between calls as well as during them
    finally:
        stop.set()
        thread.join()
    assert errors == []
    assert True in outcomes and False in outcomes  # hits, and removals in between (then rebuilt)


def test_a_hit_read_right_after_is_never_evicted_under_the_default_idle_time(tmp_path) -> None:
    _build(tmp_path, 9)
    for _ in range(5):
        built = _build(tmp_path, 9)
        assert cache_usage.evict(tmp_path, 1) == []
        assert hashlib.sha256(built.path.read_bytes()).hexdigest() == built.sha256


def test_clear_empties_a_cache_and_refuses_other_directories(tmp_path) -> None:
    cache = tmp_path / "cache"
    _build(cache, 10), _build(cache, 11)
    removed, skipped = cache_usage.clear(cache)
    assert len(removed) == 2 and skipped == []
    assert cache_usage.usage(cache).entries == ()
    home = tmp_path / "home"
    (home / "ab").mkdir(parents=True)
    (home / "notes.txt").write_text("mine")
    built = _build(home, 15)  # a cache dir that holds other things too: eviction leaves them alone
    _age(built, 3600)
    with pytest.raises(NotACacheError, match=r"home is not a tfxla kernel cache: it holds 'notes.txt'"):
        cache_usage.clear(home)
    assert (home / "notes.txt").read_text() == "mine" and built.path.exists()
    assert [e.key for e in cache_usage.evict(home, 1)] == [built.key]
    assert (home / "notes.txt").read_text() == "mine" and (home / "ab").is_dir()


def test_the_limit_is_a_flag() -> None:
    assert Flags.parse("").cache_max_bytes == 2 << 30
    assert Flags.parse("--cache_max_bytes=1000").cache_max_bytes == 1000


def _cli(*argv: str, env_flags: str = "") -> subprocess.CompletedProcess:
    env = dict(os.environ, TFXLA_FLAGS=env_flags)
    return subprocess.run([sys.executable, "-m", "tfxla_plugin.cli", "cache", *argv], capture_output=True, text=True,
                          timeout=120, env=env)


def test_cli_info_and_clear(tmp_path) -> None:
    cache = tmp_path / "cache"
    a = _build(cache, 12)
    total = cache_usage.usage(cache).total_bytes
    info = _cli("info", env_flags=f"--cache_dir={cache} --cache_max_bytes=5000")
    assert info.returncode == 0, info.stderr
    assert info.stdout.splitlines() == [f"location: {cache}", "entries: 1", f"total: {total} bytes ({total / 1024:.1f} KiB)",
                                        "limit: 5000 bytes (4.9 KiB) (TFXLA_FLAGS=--cache_max_bytes)"]
    cleared = _cli("clear", "--cache_dir", str(cache))
    assert cleared.returncode == 0, cleared.stderr
    assert cleared.stdout.startswith(f"removed 1 entries (") and not a.path.exists()
    (tmp_path / "mine.txt").write_text("x")
    refused = _cli("clear", "--cache_dir", str(tmp_path))
    assert refused.returncode == 1 and "is not a tfxla kernel cache: it holds " in refused.stderr
    assert "nothing removed" in refused.stderr and (tmp_path / "mine.txt").exists()


def test_a_compile_through_the_api_trims_the_cache_to_the_flag(tmp_path, monkeypatch) -> None:
    import tensorflow as tf

    import tfxla_plugin

    old = [_build(tmp_path, v) for v in (13, 14)]
    for built in old:
        _age(built, 3600)
    monkeypatch.setenv("TFXLA_FLAGS", f"--cache_dir={tmp_path} --cache_max_bytes=1")

    @tfxla_plugin.function(jit_compile=True)
    def f(x):
        return tf.tanh(x) * 3.0 + 1.0

    x = tf.constant([[0.5, -2.0]])
    np.testing.assert_allclose(f(x).numpy(), (tf.tanh(x) * 3.0 + 1.0).numpy(), rtol=1e-6)
    left = cache_usage.usage(tmp_path).entries
    assert not any(b.path.exists() for b in old)  # older than the idle time: evicted
    # the new kernel and its cluster's plan (tfxla_plugin/kernel_plan.py) stay
    assert sorted(Path(f).suffix for e in left for f in e.files if not f.name.endswith(".sha256")) == \
        [".c", ".plan", ".so"]
    assert all(Path(f).name.startswith(e.key) for e in left for f in e.files)
