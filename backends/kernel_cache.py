"""The content-addressed build cache shared by the C and CUDA compiler drivers.

An artifact is cached under ``<cache_dir>/<key[:2]>/<key><output_suffix>`` beside its source
``<key><source_suffix>``, where ``key`` hashes the source, the full command and the compiler's version
(each driver computes it). Writes are atomic (build to a temporary name, then ``os.replace``) and a
file lock per key makes parallel processes build each artifact once. A failure raises
``CompileError`` carrying the command, the compiler's stderr and the path of the kept source.
"""

from __future__ import annotations

import fcntl
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable


class CompileError(RuntimeError):
    def __init__(self, message: str, command: list[str], stderr: str, source_path: str):
        super().__init__(f"{message}\ncommand: {shlex.join(command)}\nsource: {source_path}\n{stderr}")
        self.command = command
        self.stderr = stderr
        self.source_path = source_path


def default_cache_dir() -> Path:
    env = os.environ.get("TFXLA_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "tfxla_plugin" / "kernels"


@dataclass(frozen=True)
class CachedBuild:
    path: Path
    source_path: Path
    key: str
    cache_hit: bool
    command: tuple[str, ...]
    stderr: str = ""  # the compiler's diagnostics of the build that produced it ("" on a hit)


def build_cached(source: str, key: str, command: Callable[[str, str], list[str]], *,
                 cache_dir: str | os.PathLike | None, name: str, source_suffix: str, output_suffix: str,
                 tool: str) -> CachedBuild:
    """Build ``source`` with ``command(source_path, output_path)`` unless ``key`` is cached already."""
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    directory = root / key[:2]
    directory.mkdir(parents=True, exist_ok=True)
    out_path = directory / f"{key}{output_suffix}"
    src_path = directory / f"{key}{source_suffix}"

    def hit() -> CachedBuild:
        return CachedBuild(out_path, src_path, key, True, tuple(command(str(src_path), str(out_path))))

    if out_path.exists():
        return hit()
    with open(directory / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if out_path.exists():  # another process built it while we waited
                return hit()
            atomic_write(src_path, source.encode())
            fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=output_suffix, dir=directory)
            os.close(fd)
            cmd = command(str(src_path), tmp)
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            except (OSError, subprocess.TimeoutExpired) as e:
                os.unlink(tmp)
                raise CompileError(f"{tool} could not run or timed out: {e}", cmd, str(e), str(src_path)) from e
            if proc.returncode != 0:
                os.unlink(tmp)
                raise CompileError(f"{tool} failed with exit code {proc.returncode}", cmd, proc.stderr,
                                   str(src_path))
            os.replace(tmp, out_path)
            return CachedBuild(out_path, src_path, key, False, tuple(cmd), proc.stderr)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
