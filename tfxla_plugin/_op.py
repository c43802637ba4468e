"""Building and loading the ``TfxlaLaunch`` op library (C++ sources in ``ops/``: ``tfxla_launch.cc``).

``load_op_library()`` returns the module ``tf.load_op_library`` gives (its ``tfxla_launch``
function calls the op), loading the library once per process from the first of:

1. ``_tfxla_launch_op.so`` next to this file, built into the wheel by the build backend
   (``build_backend/tfxla_build.py``, when TensorFlow was importable while building), when its
   sidecar ``_tfxla_launch_op.json`` records this TensorFlow version, TF's compile and link
   flags, and the sha256 of the sources shipped beside it;
2. ``<cache>/tfxla_plugin/ops/<tf-version>/tfxla_launch_<key>.so`` (``<cache>`` is
   ``$XDG_CACHE_HOME`` or ``~/.cache``; ``key`` hashes the sources and the full command), built on
   first use under a file lock and written atomically, so concurrent processes build it once. The
   directories are created 0700 and the files 0600; a directory others can write is refused
   (``backends.kernel_cache.UnsafeCacheError``).

Either library is used only if its bytes are a complete ELF object whose sha256 its sidecar records
(``"sha256"``, written by ``build``); a cached one that is not (truncated, damaged: ``dlopen`` of a
truncated object dies of SIGBUS) is rebuilt, with one line on stderr. The checked bytes are the bytes
loaded: they are copied into a sealed memfd and ``tf.load_op_library`` loads ``/proc/self/fd/N`` of it
(``backends.shared_object``), so the file cannot change between the check and the load.

A failed build raises ``OpBuildError`` carrying the compiler command and its stderr. This module
imports only the standard library at import time, so the build backend can load it by path and call
``build()`` without importing the package.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "ops" / "tfxla_launch.cc"
PACKAGED_SO = "_tfxla_launch_op.so"
SIDECAR = "_tfxla_launch_op.json"
BASE_FLAGS = ("-std=c++17", "-shared", "-fPIC", "-O2")
LABEL = "the TfxlaLaunch op library"  # how errors name what is built

class Once:
    """``load()`` run at most once per process, thread-safe: its value kept, or its exception kept and
    raised again on every later call (a failing multi-second build is not rerun, a half-done
    registration not repeated)."""

    def __init__(self, load):
        self._load = load
        self._lock = threading.Lock()
        self.value = None
        self._failure: BaseException | None = None

    def __call__(self):
        with self._lock:
            if self.value is not None:
                return self.value
            if self._failure is not None:
                raise self._failure
            try:
                self.value = self._load()
            except Exception as e:
                self._failure = e
                raise
            return self.value
_library_fds: list[int] = []  # the sealed copies loaded: open for good (TF and glibc know them by name)


class OpBuildError(RuntimeError):
    """Compiling the op library failed; ``command`` and ``stderr`` say how."""

    def __init__(self, message: str, command: list[str], stderr: str):
        super().__init__(f"{message}\ncommand: {shlex.join(command)}\n{stderr}")
        self.command = command
        self.stderr = stderr


TBB_INSTALL = "pip install tbb==2021.13.1 tbb-devel==2021.13.1"


def tbb_flags(roots: list[str] | None = None) -> list[str]:
    """How the op finds oneTBB, whose pool runs the kernels' parallel loops (``ops/parallel.h``; the pool
    oneDNN's TBB build uses too, docs/design.md §7): its headers and ``libtbb.so.12`` under the first of
    ``$TFXLA_TBB_ROOT``, ``sys.prefix`` and ``sys.base_prefix`` that has both, linked with ``DT_RPATH``."""
    for root in roots or [os.environ.get("TFXLA_TBB_ROOT", ""), sys.prefix, sys.base_prefix]:
        if not root:
            continue
        inc, lib = Path(root) / "include", Path(root) / "lib"
        if (inc / "oneapi" / "tbb" / "parallel_for.h").is_file() and (lib / "libtbb.so.12").is_file():
            return [f"-I{inc}", f"-L{lib}", "-l:libtbb.so.12", f"-Wl,-rpath,{lib}", "-Wl,--disable-new-dtags"]
    raise OpBuildError(f"oneTBB's headers and libtbb.so.12 are not under {sys.prefix} ({TBB_INSTALL})", [], "")


def tf_build_info() -> dict:
    """What a built library depends on: TF's version and its compile/link flags (incl. the C++ ABI), and
    where oneTBB is."""
    import tensorflow as tf

    return {"tf_version": tf.__version__,
            "compile_flags": list(tf.sysconfig.get_compile_flags()),
            "link_flags": list(tf.sysconfig.get_link_flags()),
            "tbb_flags": tbb_flags()}


def build_command(output: str | os.PathLike, info: dict, source: Path = SOURCE) -> list[str]:
    cxx = os.environ.get("CXX", "g++")
    return [cxx, *BASE_FLAGS, str(source), "-o", str(output), *info["compile_flags"], *info["link_flags"],
            *info.get("tbb_flags", []), "-ldl", "-w"]


def source_digest(directory: Path = SOURCE.parent) -> str:
    """sha256 over the op's sources (``*.cc`` and the headers they include), names and contents."""
    h = hashlib.sha256()
    for path in sorted([*directory.glob("*.cc"), *directory.glob("*.h")]):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def build(output: str | os.PathLike, info: dict | None = None, source: Path = SOURCE, *,
          private: bool = False, label: str = LABEL) -> Path:
    """Compile the op library (or another library of ours from ``source``, named ``label`` in errors) to
    ``output`` (atomically) and write its sidecar (with the library's sha256); returns the path.
    ``private``: files 0600 (the user cache), else 0755/0644 (a package)."""
    info = info or tf_build_info()
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{output.stem}.", suffix=".so", dir=output.parent)
    os.close(fd)
    cmd = build_command(tmp, info, source)
    try:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise OpBuildError(f"cannot build {label}: {e}", cmd, "") from e
        if proc.returncode != 0:
            raise OpBuildError(f"building {label} failed (exit {proc.returncode})",
                               cmd, proc.stderr)
        os.chmod(tmp, 0o600 if private else 0o755)
        sidecar = {**info, "source_sha256": source_digest(source.parent),
                   "command": build_command(output, info, source),
                   "sha256": hashlib.sha256(Path(tmp).read_bytes()).hexdigest()}
        _atomic_write(output.with_suffix(".json"), json.dumps(sidecar, indent=1).encode(),
                      0o600 if private else 0o644)
        os.replace(tmp, output)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return output


def _atomic_write(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def packaged_library(info: dict) -> Path | None:
    """The install-time library, if it exists and was built for this TF and this source."""
    so, sidecar = HERE / PACKAGED_SO, HERE / SIDECAR
    if not so.exists() or not sidecar.exists():
        return None
    try:
        built = json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return None
    same_tf = all(built.get(k) == info.get(k) for k in ("tf_version", "compile_flags", "link_flags", "tbb_flags"))
    return so if same_tf and built.get("source_sha256") == source_digest() else None


def cache_base() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"))


def cache_dir(tf_version: str) -> Path:
    return cache_base() / "tfxla_plugin" / "ops" / tf_version


def cache_path(info: dict, source: Path = SOURCE) -> Path:
    """Where the user cache keeps the library built from ``source`` for this TF (its directory made
    private here): ``<stem of source>_<key>.so``."""
    from backends.kernel_cache import private_dir

    key_cmd = shlex.join(build_command("OUTPUT.so", info, Path("SOURCE.cc")))
    key = hashlib.sha256(f"{source_digest(source.parent)}\0{key_cmd}".encode()).hexdigest()[:16]
    directory = private_dir(cache_dir(info["tf_version"]), "op library cache directory", top=cache_base())
    return directory / f"{source.stem}_{key}.so"


def library_bytes(so: Path) -> tuple[bytes | None, str]:
    """The bytes of the op library ``so`` when they are a complete ELF object whose sha256 its sidecar
    records, else ``(None, why)``."""
    from backends.shared_object import LoadError, elf_problem, read_regular_file

    sidecar = so.with_suffix(".json")
    try:
        recorded = json.loads(sidecar.read_text()).get("sha256")
        data = read_regular_file(so)
    except (OSError, ValueError, AttributeError, LoadError) as e:
        return None, f"{e}" if isinstance(e, LoadError) else f"its sidecar {sidecar} cannot be read ({e})"
    problem = elf_problem(data)
    if problem:
        return None, problem
    digest = hashlib.sha256(data).hexdigest()
    if digest != recorded:
        return None, f"its sha256 is {digest}, but its sidecar records {recorded}"
    return data, ""


def cached_library(info: dict, source: Path = SOURCE, label: str = LABEL) -> tuple[Path, bytes]:
    """The user-cache library built from ``source`` for this TF and its checked bytes, built (under a
    file lock) if it is missing or does not check out."""
    so = cache_path(info, source)
    data, why = library_bytes(so)
    if data is not None:
        return so, data
    lock = os.open(so.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data, why = library_bytes(so)  # another process may have built it while we waited
        if data is None:
            if so.exists():
                print(f"tfxla: the cached {label.removeprefix('the ')} {so} is unusable ({why}); rebuilding it",
                      file=sys.stderr)
            build(so, info, source, private=True, label=label)
            data, why = library_bytes(so)
            if data is None:
                raise OpBuildError(f"{label} just built at {so} is unusable: {why}", [], "")
    finally:
        os.close(lock)  # releases the flock
    return so, data


def load_op_library() -> ModuleType:
    """The loaded op library (``.tfxla_launch``); builds it first if needed. Thread-safe, once per process.

    TensorFlow is imported before the load-once lock is taken: importing it runs the package's
    post-import hook, which loads the library itself (a re-entry on the lock would wait forever)."""
    import tensorflow  # noqa: F401

    return _LOADED()


def _load() -> ModuleType:
    import tensorflow as tf

    info = tf_build_info()
    packaged = packaged_library(info)
    data = library_bytes(packaged)[0] if packaged is not None else None
    if data is not None:
        try:
            return _load_bytes(packaged, data)
        except tf.errors.OpError:
            pass  # e.g. a TF build with the same version string but other symbols: use the cache
    so, data = cached_library(info)
    try:
        return _load_bytes(so, data)
    except tf.errors.NotFoundError:
        # dlopen failed on a complete, recorded object (e.g. TF's symbols changed): rebuild it once.
        so.unlink(missing_ok=True)
        return _load_bytes(*cached_library(info))


def _load_bytes(so: Path, data: bytes) -> ModuleType:
    """``tf.load_op_library`` of ``data`` (the checked bytes of ``so``) through a sealed memfd."""
    import tensorflow as tf

    from backends.shared_object import sealed_copy

    fd = sealed_copy(data, so.name)
    _library_fds.append(fd)  # never closed: a reused fd number would name the loaded library to dlopen and TF
    return tf.load_op_library(f"/proc/self/fd/{fd}")


_LOADED = Once(_load)

__all__ = ["OpBuildError", "build", "build_command", "load_op_library", "tf_build_info"]
