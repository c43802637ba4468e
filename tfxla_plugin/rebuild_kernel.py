"""``python -m tfxla_plugin.rebuild_kernel [--sha256 HASH] SOURCE``: compile a stored kernel source into the
local cache.

The ``TfxlaLaunch`` op runs this when a wrapped SavedModel's shared object cannot be used here (its
sha256 is not the recorded one, or this CPU lacks a feature it was built for) and the C source beside
it matches its recorded hash, which it passes as ``--sha256``: the source is read once and those bytes
are compiled only if they hash to it. It is compiled with this machine's compiler and flags into the
local kernel cache (``--cache_dir`` of ``TFXLA_FLAGS``, else ``~/.cache/tfxla_plugin/kernels``), which
records the object's sha256 beside it (``<so>.sha256``, checked by the op before it loads the object);
the last line printed is the path of the shared object.

The backend is chosen by the source's suffix (``kernel_backends.for_source``): ``.c`` is the CPU backend's
C (gcc), ``.cu`` a CUDA host launcher (nvcc, the same shared-object build as ``--backend=cuda``). The op
only looks for ``<kernel>.c`` beside a kernel, so it never rebuilds a CUDA kernel by itself (a wrapped
CUDA model records no source hashes and the op refuses a changed kernel); this command rebuilds one by hand.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from backends.kernel_cache import CompileError
from backends.shared_object import LoadError, read_regular_file
from tfxla_plugin.kernel_backends import cpu_rebuild_options as compiler_options
from tfxla_plugin.kernel_backends import for_source

__all__ = ["compiler_options", "main", "rebuild"]


def rebuild(source_path: str | Path, sha256: str | None = None) -> Path:
    """Compiles the source at ``source_path`` (its bytes must hash to ``sha256`` when given); the object's path."""
    from tfxla_plugin.flags import Flags

    backend = for_source(source_path)
    backend.check()
    data = read_regular_file(source_path)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise ValueError(f"{source_path} has sha256 {hashlib.sha256(data).hexdigest()}, not the expected {sha256}: "
                         f"refusing to compile it")
    return backend.rebuild(str(source_path), data.decode(), Flags.from_env().cache_dir)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    sha256 = None
    if len(args) == 3 and args[0] == "--sha256":
        sha256, args = args[1], args[2:]
    if len(args) != 1:
        print("usage: python -m tfxla_plugin.rebuild_kernel [--sha256 HASH] SOURCE.c|SOURCE.cu", file=sys.stderr)
        return 2
    try:
        path = rebuild(args[0], sha256)
    except (OSError, RuntimeError, ValueError, CompileError, LoadError) as e:
        print(f"cannot rebuild {args[0]}: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
