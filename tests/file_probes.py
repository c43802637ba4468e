"""Probes of how this process opens and maps files (tests of the loaders' trust, see
tests/test_kernel_cache_trust.py and tests/test_launch_op.py)."""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
from pathlib import Path

ALL_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_IN_OPEN, _IN_CLOSE_NOWRITE = 0x20, 0x10


def count_opens(path: Path, action) -> int:
    """How many times ``path`` is opened (inotify IN_OPEN) while ``action()`` runs. Closes are watched too:
    inotify merges an event into an identical unread one before it, so open, open would count once."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    assert fd >= 0 and libc.inotify_add_watch(fd, str(path).encode(), _IN_OPEN | _IN_CLOSE_NOWRITE) >= 0
    try:
        action()
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            data = b""
    finally:
        os.close(fd)
    count, offset = 0, 0
    while offset < len(data):  # struct inotify_event {int wd; uint32 mask, cookie, len; char name[len];}
        _, mask, _, length = struct.unpack_from("iIII", data, offset)
        count += bool(mask & _IN_OPEN)
        offset += 16 + length
    return count


def memfd_seals(name: str) -> int | None:
    """The seals of this process's memfd named ``name`` (F_GET_SEALS), or None if there is none."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/memfd:{name} "):
            return fcntl.fcntl(int(fd), fcntl.F_GET_SEALS)
    return None


def mapped_files() -> str:
    return Path("/proc/self/maps").read_text()
