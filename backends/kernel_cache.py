"""The content-addressed build cache shared by the C and CUDA compiler drivers.

An artifact is cached under ``<cache_dir>/<key[:2]>/<key><output_suffix>`` beside its source
``<key><source_suffix>``, where ``key`` hashes the source, the full command and the compiler's version
(each driver computes it), and its hash record ``<key><output_suffix>.sha256`` (the artifact's sha256,
written when it is built). Writes are atomic (build to a temporary name, then ``os.replace``) and a
file lock per key makes parallel processes build each artifact once. A failure raises
``CompileError`` carrying the command, the compiler's stderr and the path of the kept source.

Trust: directories are created 0700 and files 0600, and a cache directory another user could write
(group/other-writable, or owned by someone else) is refused with ``UnsafeCacheError``, as ssh refuses
such a key file: anyone who can write the cache can make every process that uses it run their code.
A hit is checked against its record on every use: an artifact that does not match is refused
(``UnsafeCacheError`` naming it), one without a record (an entry from before records) is rebuilt.
Loaders check the bytes they load against the record again (``backends.shared_object``).

``read_cached``/``write_cached`` store plain bytes under a key (``tfxla_plugin/kernel_plan.py``'s plans)
with the same lock, record, atomic replace and check; ``entry_path``, ``key_lock`` and ``used_hit`` are
the steps both share.

Size: a hit touches its record's mtime under a shared lock of its key, so the record's mtime is the
entry's last use; ``backends.cache_usage`` lists entries, evicts the least recently used ones beyond a
size limit (``TFXLA_FLAGS=--cache_max_bytes``) and clears a cache, each entry under its key's lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shlex
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from backends.shared_object import LoadError, read_record, read_regular_file, record_path


T = TypeVar("T")
_builds = [0]  # compiler processes ``build_cached`` ran in this process (``builds``), under _builds_lock
_builds_lock = threading.Lock()


def builds() -> int:
    """How many compiler processes this process has run for the cache (cache misses built): what a
    cache hit saves, counted (tests, ``bench/compile_bench.py``)."""
    return _builds[0]


class CompileError(RuntimeError):
    def __init__(self, message: str, command: list[str], stderr: str, source_path: str):
        super().__init__(f"{message}\ncommand: {shlex.join(command)}\nsource: {source_path}\n{stderr}")
        self.command = command
        self.stderr = stderr
        self.source_path = source_path


class UnsafeCacheError(RuntimeError):
    """A cache directory other users could write, or a cache entry that is not what was built there."""


def default_cache_dir() -> Path:
    return default_cache_root()[0]


def default_cache_root() -> tuple[Path, Path]:
    """The default cache directory, and the level it is checked from (``private_dir``'s ``top``):
    ``$TFXLA_CACHE_DIR`` itself, else ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    env = os.environ.get("TFXLA_CACHE_DIR")
    if env:
        return Path(env), Path(env)
    base = Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"))
    return base / "tfxla_plugin" / "kernels", base


def tool_version(exe: str, what: str, timeout: float) -> str:
    """``exe --version``'s output (part of every cache key); ``CompileError`` naming ``what`` (e.g. "the
    C compiler 'gcc'") when it cannot run."""
    cmd = [exe, "--version"]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CompileError(f"cannot run {what}: {e}", cmd, "", "") from e
    if out.returncode != 0:
        raise CompileError(f"{' '.join(cmd)} failed", cmd, out.stderr, "")
    return out.stdout.strip()


def cache_key(source: str, command: list[str], *facts: str) -> str:
    """The key of an artifact: sha256 of the source, the command (with placeholder paths, so the key does
    not depend on where it builds) and what else decides the output (the tool's version, the target it
    resolves), ``\\0``-separated."""
    h = hashlib.sha256()
    for k, part in enumerate((source, shlex.join(command), *facts)):
        h.update((("\0" if k else "") + part).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class CachedBuild:
    path: Path
    source_path: Path
    key: str
    cache_hit: bool
    command: tuple[str, ...]
    stderr: str = ""  # the compiler's diagnostics of the build that produced it ("" on a hit)
    sha256: str = ""  # of the artifact, as its record says and its bytes were checked to be


def build_cached(source: str, key: str, command: Callable[[str, str], list[str]], *,
                 cache_dir: str | os.PathLike | None, name: str, source_suffix: str, output_suffix: str,
                 tool: str) -> CachedBuild:
    """Build ``source`` with ``command(source_path, output_path)`` unless ``key`` is cached already."""
    directory, out_path = entry_path(key, cache_dir, output_suffix)
    src_path = directory / f"{key}{source_suffix}"

    def hit() -> CachedBuild | None:
        sha = checked_sha256(out_path)
        return None if sha is None else CachedBuild(out_path, src_path, key, True,
                                                    tuple(command(str(src_path), str(out_path))), sha256=sha)

    with key_lock(directory, key) as lock:
        if (found := used_hit(out_path, hit)) is not None:
            return found
        fcntl.flock(lock, fcntl.LOCK_EX)
        if out_path.exists() and (found := hit()) is not None:  # another process built it while we waited
            os.utime(record_path(out_path))
            return found
        atomic_write(src_path, source.encode())
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=output_suffix, dir=directory)
        os.close(fd)
        cmd = command(str(src_path), tmp)
        with _builds_lock:
            _builds[0] += 1
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            os.unlink(tmp)
            raise CompileError(f"{tool} could not run or timed out: {e}", cmd, str(e), str(src_path)) from e
        if proc.returncode != 0:
            os.unlink(tmp)
            raise CompileError(f"{tool} failed with exit code {proc.returncode}", cmd, proc.stderr,
                               str(src_path))
        os.chmod(tmp, 0o600)  # the linker gave it its own mode (executable, after the umask)
        sha = write_record(out_path, Path(tmp))
        os.replace(tmp, out_path)
        return CachedBuild(out_path, src_path, key, False, tuple(cmd), proc.stderr, sha256=sha)


def entry_path(key: str, cache_dir: str | os.PathLike | None, suffix: str) -> tuple[Path, Path]:
    """(the checked shard directory of ``key``, ``<key><suffix>`` in it) in the cache at ``cache_dir``."""
    root, top = (Path(cache_dir), Path(cache_dir)) if cache_dir is not None else default_cache_root()
    directory = private_dir(root / key[:2], top=top)
    return directory, directory / f"{key}{suffix}"


@contextlib.contextmanager
def key_lock(directory: Path, key: str) -> Iterator[int]:
    """``key``'s lock file, held shared (a hit is checked and marked used while eviction cannot remove it);
    the caller may upgrade it (``fcntl.flock(lock, LOCK_EX)``) to build. Released on exit."""
    lock = os.open(directory / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield lock
    finally:
        os.close(lock)  # releases the flock


def used_hit(path: Path, hit: Callable[[], T | None]) -> T | None:
    """``hit()`` for an existing entry ``path`` (under its key's lock), its record touched as "last used"
    (least-recently-used eviction); None when it is missing, has no record, or does not match it (checked
    again under the exclusive lock: a build may be replacing a record-less entry)."""
    if not path.exists():
        return None
    try:
        found = hit()
    except UnsafeCacheError:
        return None
    if found is not None:
        os.utime(record_path(path))
    return found


def read_cached(key: str, *, cache_dir: str | os.PathLike | None, suffix: str) -> bytes | None:
    """The bytes stored under ``key`` (``write_cached``), checked against their record, or None. Raises
    ``UnsafeCacheError`` for an entry that changed after it was written."""
    directory, path = entry_path(key, cache_dir, suffix)
    with key_lock(directory, key):  # a writer holds it exclusively: no record is being replaced here
        if not path.exists():
            return None
        data = checked_bytes(path)
        if data is not None:
            os.utime(record_path(path))  # "last used"
        return data


def write_cached(key: str, data: bytes, *, cache_dir: str | os.PathLike | None, suffix: str) -> Path:
    """Stores ``data`` under ``key`` (atomically, with its record, under the key's exclusive lock)."""
    directory, path = entry_path(key, cache_dir, suffix)
    with key_lock(directory, key) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=suffix, dir=directory)  # 0600
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        write_record(path, Path(tmp))
        os.replace(tmp, path)
    return path


def atomic_write(path: Path, data: bytes) -> None:
    """Writes ``path`` (mode 0600) through a temporary file in its directory and a rename."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp creates it 0600
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def write_record(path: Path, built: Path | None = None) -> str:
    """Records the sha256 of ``built`` (default ``path``), the file about to become ``path``; returns it."""
    sha = hashlib.sha256((built or path).read_bytes()).hexdigest()
    atomic_write(record_path(path), f"{sha}  {path.name}\n".encode())
    return sha


def checked_sha256(path: Path) -> str | None:
    """The sha256 of cache entry ``path`` when it matches its record; None when it has no record (it is
    then rebuilt). Raises ``UnsafeCacheError`` when it does not match: it changed after it was built."""
    data = checked_bytes(path)
    return None if data is None else hashlib.sha256(data).hexdigest()


def checked_bytes(path: Path) -> bytes | None:
    """The bytes of cache entry ``path`` when they match its record; None when it has no record.
    Raises ``UnsafeCacheError`` when they do not match (``checked_sha256``)."""
    try:
        recorded = read_record(path)
        if recorded is None:
            return None
        data = read_regular_file(path)
        sha = hashlib.sha256(data).hexdigest()
    except LoadError as e:
        raise UnsafeCacheError(f"kernel cache entry {path}: {e}; delete it to rebuild it") from None
    if sha != recorded:
        raise UnsafeCacheError(f"kernel cache entry {path} has sha256 {sha}, but {record_path(path)} records "
                               f"{recorded}: it changed after it was built, refusing to use it (delete both "
                               f"files to rebuild it)")
    return data


def private_dir(path: Path, what: str = "kernel cache directory", top: Path | None = None) -> Path:
    """``path`` as a directory only this user can write. From ``top`` (default: ``path``'s parent) down,
    each level is checked (``check_private``) before anything is created in it, so nobody else can swap
    a level for one of their own; missing levels are created 0700 whatever the umask."""
    path = Path(path)
    top = Path(top) if top is not None and (Path(top) == path or Path(top) in path.parents) else None
    levels = [path] + ([p for p in path.parents if p == top or top in p.parents] if top is not None else [])
    for level in reversed(levels):
        for missing in reversed([level, *level.parents]):  # with its missing parents, 0700 too
            if not missing.exists():
                try:
                    os.mkdir(missing, 0o700)
                except FileExistsError:
                    pass
        check_private(level, what)
    return path


def check_private(path: Path, what: str = "kernel cache directory") -> None:
    """Raises ``UnsafeCacheError`` unless ``path`` is a directory owned by this user (or root) that
    neither its group nor others can write."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeCacheError(f"{what} {path} is not a directory")
    if st.st_uid not in (os.geteuid(), 0):
        raise UnsafeCacheError(f"{what} {path} is owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}): "
                               f"refusing to use it, since its owner could plant code in it; use a directory of "
                               f"your own (TFXLA_CACHE_DIR or XDG_CACHE_HOME)")
    if st.st_mode & 0o022:
        who = "group and others" if st.st_mode & 0o022 == 0o022 else "group" if st.st_mode & 0o020 else "others"
        raise UnsafeCacheError(f"{what} {path} is writable by its {who} (mode {stat.S_IMODE(st.st_mode):04o}): "
                               f"refusing to use it, since another user could plant code in it; fix it with "
                               f"'chmod go-w {path}'")
