"""What a kernel cache holds, and keeping it small: listing, least-recently-used eviction, clearing.

An entry of a cache (``backends/kernel_cache.py``) is one key's files in ``<root>/<key[:2]>/``: the
artifact, its sha256 record and its source; its last use is its record's mtime (``build_cached``
touches it on every hit, under a shared lock of the key). ``<key>.lock`` files (empty) stay, as do
the shard directories: removing either could pull them from under a process about to lock them.

Eviction and clearing remove an entry only while holding its key's lock exclusively, taken without
waiting: an entry being built (exclusive lock) or being checked as a hit (shared lock) is skipped, so
a concurrent reader sees either the whole entry or none (then it builds it again). ``evict`` also keeps
entries used in the last ``min_idle`` seconds, since a process that got an artifact's path from a hit
may read its bytes a little later (the loaded bytes are a sealed copy: removal after that is harmless).
One process evicts at a time (``.evict.lock`` in the root); another finding it busy skips the round.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

from backends.kernel_cache import check_private, default_cache_root

DEFAULT_MAX_BYTES = 2 << 30  # 2 GiB
DEFAULT_MIN_IDLE = 600.0  # seconds an entry is kept after its last use, whatever the limit
EVICT_LOCK = ".evict.lock"
_SHARD = re.compile(r"[0-9a-f]{2}")
_KEYED = re.compile(r"([0-9a-f]{64})(.*)")


class NotACacheError(ValueError):
    """A directory that does not look like a tfxla kernel cache (refused by ``clear``)."""


@dataclass(frozen=True)
class Entry:
    key: str
    files: tuple[Path, ...]  # the artifact, its record, its source (not the lock file)
    size: int  # bytes, all files together
    last_used: float  # the record's mtime (the newest file's when there is no record)


@dataclass(frozen=True)
class Usage:
    root: Path
    entries: tuple[Entry, ...]

    @property
    def total_bytes(self) -> int:
        return sum(e.size for e in self.entries)


def cache_root(cache_dir: str | os.PathLike | None) -> Path:
    """The directory ``build_cached(cache_dir=...)`` uses."""
    return Path(cache_dir) if cache_dir is not None else default_cache_root()[0]


def usage(cache_dir: str | os.PathLike | None = None) -> Usage:
    """The entries of the cache at ``cache_dir`` (default: the default cache), oldest use first; anything
    else in the directory is ignored (``clear`` refuses such a directory, eviction leaves it alone)."""
    root = cache_root(cache_dir)
    if not root.is_dir():
        return Usage(root, ())
    found: dict[str, list[Path]] = {}
    for shard in root.iterdir():
        if not (_SHARD.fullmatch(shard.name) and shard.is_dir()):
            continue
        for f in shard.iterdir():
            m = _KEYED.fullmatch(f.name)
            if m is None or m.group(2) == ".lock" or not f.is_file():
                continue  # a temporary file being written (".name.XXXX"), or a lock
            found.setdefault(m.group(1), []).append(f)
    entries = []
    for key, files in found.items():
        stats = {}
        for f in files:
            try:
                stats[f] = f.stat()
            except FileNotFoundError:  # removed since it was listed
                pass
        if not stats:
            continue
        records = [st for f, st in stats.items() if f.name.endswith(".sha256")]
        last = max(st.st_mtime for st in (records or stats.values()))
        entries.append(Entry(key, tuple(sorted(stats)), sum(st.st_size for st in stats.values()), last))
    return Usage(root, tuple(sorted(entries, key=lambda e: (e.last_used, e.key))))


def check_is_cache(root: Path) -> None:
    """Raises ``NotACacheError`` unless ``root`` holds only shard directories of key-named files."""
    def refuse(what: Path) -> None:
        raise NotACacheError(f"{root} is not a tfxla kernel cache: it holds {what.name!r}, which no cache holds "
                             f"(a cache holds only two-hex-digit directories of files named by sha256 keys)")

    if not root.is_dir():
        raise NotACacheError(f"{root} is not a directory")
    for shard in root.iterdir():
        if shard.name == EVICT_LOCK:
            continue
        if not (_SHARD.fullmatch(shard.name) and shard.is_dir() and not shard.is_symlink()):
            refuse(shard)
        for f in shard.iterdir():
            if not (f.name.startswith(".") or _KEYED.fullmatch(f.name)) or f.is_dir():
                refuse(shard / f.name)


def remove_entry(root: Path, entry: Entry, unused_since: float | None = None) -> bool:
    """Removes ``entry`` under its key's exclusive lock, taken without waiting; False (nothing removed)
    when another process holds the lock, or when the entry was used after ``unused_since``."""
    lock_path = root / entry.key[:2] / f"{entry.key}.lock"
    try:
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            raise
        records = [f for f in entry.files if f.name.endswith(".sha256")]
        if unused_since is not None and any(_mtime(f) > unused_since for f in records):
            return False  # a hit touched it after it was listed
        for f in sorted(entry.files, key=lambda f: f.name.endswith(".sha256")):  # the record last
            try:
                os.unlink(f)
            except FileNotFoundError:
                pass
        return True
    finally:
        os.close(lock)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def evict(cache_dir: str | os.PathLike | None, max_bytes: int, keep: Collection[str] = (),
          min_idle: float = DEFAULT_MIN_IDLE) -> list[Entry]:
    """Removes least recently used entries until the cache holds at most ``max_bytes`` (0: no limit),
    never one whose key is in ``keep``, one used in the last ``min_idle`` seconds, or one another
    process holds; returns the removed entries. A no-op while another process evicts."""
    root = cache_root(cache_dir)
    if max_bytes <= 0 or not root.is_dir():
        return []
    check_private(root)
    lock = os.open(root / EVICT_LOCK, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []
        current = usage(root)
        total, removed, now = current.total_bytes, [], time.time()
        for entry in current.entries:
            if total <= max_bytes:
                break
            if entry.key in keep or now - entry.last_used < min_idle:
                continue
            if remove_entry(root, entry, unused_since=entry.last_used):
                total -= entry.size
                removed.append(entry)
        return removed
    finally:
        os.close(lock)


def clear(cache_dir: str | os.PathLike | None = None) -> tuple[list[Entry], list[Entry]]:
    """Removes every entry of the cache; returns (removed, skipped: held by another process right now).
    Raises ``NotACacheError`` for a directory that is not a tfxla kernel cache, before removing anything."""
    root = cache_root(cache_dir)
    if root.exists():
        check_is_cache(root)
    current = usage(root)
    if current.entries:
        check_private(current.root)
    removed, skipped = [], []
    for entry in current.entries:
        (removed if remove_entry(current.root, entry) else skipped).append(entry)
    return removed, skipped
