"""``python -m tfxla_plugin.rebuild_kernel SOURCE``: compile a stored kernel source into the local cache.

The ``TfxlaLaunch`` op runs this when a wrapped SavedModel's shared object cannot be used here (its
sha256 is not the recorded one, or this CPU lacks a feature it was built for) and the C source beside
it matches its recorded hash. The source is compiled with this machine's compiler and flags into the
local kernel cache (``--cache_dir`` of ``TFXLA_FLAGS``, else ``~/.cache/tfxla_plugin/kernels``); the
last line printed is the path of the shared object.

The backend is chosen by the source's suffix (``kernel_backends.for_source``): ``.c`` is the CPU backend's
C (gcc), ``.cu`` a CUDA host launcher (nvcc, the same shared-object build as ``--backend=cuda``). The op
only looks for ``<kernel>.c`` beside a kernel, so it never rebuilds a CUDA kernel by itself (a wrapped
CUDA model records no source hashes and the op refuses a changed kernel); this command rebuilds one by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

from backends.kernel_cache import CompileError
from tfxla_plugin.kernel_backends import cpu_rebuild_options as compiler_options
from tfxla_plugin.kernel_backends import for_source

__all__ = ["compiler_options", "main", "rebuild"]


def rebuild(source_path: str | Path) -> Path:
    from tfxla_plugin.flags import Flags

    backend = for_source(source_path)
    backend.check()
    return backend.rebuild(str(source_path), Flags.from_env().cache_dir)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tfxla_plugin.rebuild_kernel SOURCE.c|SOURCE.cu", file=sys.stderr)
        return 2
    try:
        path = rebuild(args[0])
    except (OSError, RuntimeError, ValueError, CompileError) as e:
        print(f"cannot rebuild {args[0]}: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
