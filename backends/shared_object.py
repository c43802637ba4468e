"""Reading a shared object's bytes safely and loading exactly those bytes (the Python side of what the
TfxlaLaunch op does in ``tfxla_plugin/ops/kernel_table.h``).

* ``read_regular_file`` reads a file whole through one descriptor, refusing anything that is not a
  regular file (a FIFO would block forever, ``/dev/zero`` never ends) or is larger than ``MAX_BYTES``;
* ``elf_problem`` says why bytes are not a complete ELF object (``dlopen`` of a truncated object can
  die of SIGBUS, so this is checked first);
* ``load_library(path, sha256)`` reads ``path`` once, checks the bytes (hash, ELF), copies them into a
  sealed ``memfd`` and ``dlopen``s that, so the object loaded is the object checked. Loading the path
  again (or ``/proc/self/fd/N`` of the file itself) would not guarantee it: the file can be replaced
  or rewritten in place between the check and the load, while nobody can write a sealed memfd.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import os
import stat
import struct
import threading
from pathlib import Path

MAX_BYTES = 2 << 30  # 2 GiB: far above any kernel (a frozen model's weights included), far below /dev/zero


class LoadError(RuntimeError):
    """A shared object that cannot be read, checked or loaded; the message names the file."""


def read_regular_file(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> bytes:
    """The bytes of the regular file ``path``, read through one descriptor opened ``O_NONBLOCK`` (a FIFO
    without a writer would block the open). Raises ``LoadError`` for anything else."""
    try:
        fd = _retry_out_of_fds(lambda: os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY))
    except OSError as e:
        raise LoadError(f"cannot open {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LoadError(f"{path} is not a regular file ({_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise LoadError(f"{path} has {st.st_size} bytes, more than the limit of {max_bytes}")
        chunks, left = [], st.st_size
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 24))
            if not chunk:
                raise LoadError(f"{path} shrank while it was read ({st.st_size - left} of {st.st_size} bytes)")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return f"mode {mode:o}"


def elf_problem(data: bytes) -> str | None:
    """Why ``data`` is not a complete 64-bit little-endian ELF object, or None: the header, the program
    headers, every segment's file bytes and the section headers must all lie inside it."""
    size = len(data)
    if size < 64 or data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return f"not a 64-bit little-endian ELF file ({size} bytes)"
    phoff, shoff = struct.unpack_from("<QQ", data, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, 54)
    if phentsize < 56 or phoff + phnum * phentsize > size or shoff + shnum * shentsize > size:
        return f"truncated ELF file ({size} bytes): its header tables run past the end"
    for k in range(phnum):
        offset, = struct.unpack_from("<Q", data, phoff + k * phentsize + 8)
        filesz, = struct.unpack_from("<Q", data, phoff + k * phentsize + 32)
        if offset + filesz > size:
            return f"truncated ELF file ({size} bytes): segment {k} needs {offset + filesz}"
    return None


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def record_path(path: str | os.PathLike) -> Path:
    """Where the kernel cache keeps the sha256 of ``path``: ``<path>.sha256``, in ``sha256sum``'s format."""
    return Path(f"{path}.sha256")


def read_record(path: str | os.PathLike) -> str | None:
    """The sha256 recorded for ``path`` (``record_path``), or None when there is no record."""
    record = record_path(path)
    if not os.path.lexists(record):
        return None
    text = read_regular_file(record, max_bytes=4096).decode("ascii", "replace")
    digest = text.split()[0] if text.split() else ""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise LoadError(f"{record} is not a sha256 record (expected 64 hex digits)")
    return digest


def sealed_copy(data: bytes, name: str) -> int:
    """A memfd holding ``data``, sealed against every change (write, shrink, grow, further seals)."""
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | getattr(os, "MFD_EXEC", 0)
    try:
        try:
            fd = _retry_out_of_fds(lambda: os.memfd_create(name[:200] or "tfxla", flags))
        except OSError as e:
            if e.errno != errno.EINVAL or not getattr(os, "MFD_EXEC", 0):
                raise
            fd = _retry_out_of_fds(lambda: os.memfd_create(name[:200] or "tfxla", flags & ~os.MFD_EXEC))  # < 6.3
    except OSError as e:
        hint = " (each loaded kernel keeps one descriptor; raise the limit: ulimit -n)" \
            if e.errno in (errno.EMFILE, errno.ENFILE) else ""
        raise LoadError(f"cannot load {name}: memfd_create failed: {e.strerror}{hint}") from None
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS,
                    fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    except OSError as e:
        os.close(fd)
        raise LoadError(f"cannot load {name}: writing its sealed copy failed: {e.strerror}") from None
    return fd


def _retry_out_of_fds(call):
    """``call()``, once more after raising the soft limit on descriptors to the hard one if it ran out
    (each loaded object keeps its memfd open, see ``_loaded``; Go raises the limit the same way)."""
    import resource

    try:
        return call()
    except OSError as e:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if e.errno != errno.EMFILE or soft == hard:
            raise
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            raise e from None
        return call()


# sha256 -> (memfd, library). The memfd stays open while the library is loaded (ctypes never unloads
# one): glibc finds an already-loaded object by the name it was opened with, so a closed fd's number,
# reused by the next memfd, would make dlopen("/proc/self/fd/N") return the old object.
_loaded: dict[str, tuple[int, ctypes.CDLL]] = {}
_loaded_lock = threading.Lock()


def load_library(path: str | os.PathLike, sha256: str | None = None) -> ctypes.CDLL:
    """``ctypes.CDLL`` of the bytes of ``path`` as read once and checked: their sha256 must be ``sha256``
    (when given) and they must be a complete ELF object. One load per distinct content and process."""
    path = Path(path)
    data = read_regular_file(path)
    digest = sha256_hex(data)
    if sha256 is not None and digest != sha256:
        raise LoadError(f"{path} has sha256 {digest}, but {sha256} was recorded for it: it changed after it "
                        f"was built, refusing to load it")
    problem = elf_problem(data)
    if problem:
        raise LoadError(f"{path}: {problem}")
    with _loaded_lock:
        if digest in _loaded:
            return _loaded[digest][1]
        fd = sealed_copy(data, path.name)
        try:
            lib = ctypes.CDLL(f"/proc/self/fd/{fd}")
        except OSError as e:
            os.close(fd)  # nothing was loaded under this name
            raise LoadError(f"cannot load {path}: {e}") from None
        _loaded[digest] = (fd, lib)
        return lib


__all__ = ["LoadError", "MAX_BYTES", "elf_problem", "load_library", "read_record", "read_regular_file",
           "record_path", "sealed_copy", "sha256_hex"]
