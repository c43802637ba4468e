"""``python -m tfxla_plugin.rebuild_kernel SOURCE.c``: compile a stored kernel source into the local cache.

The ``TfxlaLaunch`` op runs this when a wrapped SavedModel's shared object cannot be used here (its
sha256 is not the recorded one, or this CPU lacks a feature it was built for) and the C source beside
it matches its recorded hash. The source is compiled with this machine's compiler and flags into the
local kernel cache (``--cache_dir`` of ``TFXLA_FLAGS``, else ``~/.cache/tfxla_plugin/kernels``); the
last line printed is the path of the shared object.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

from backends.cpu.compiler import CompileError, CompilerOptions, compile_shared_object

_DNNL_INCLUDE = '#include "oneapi/dnnl/dnnl.h"'


def compiler_options(source: str) -> CompilerOptions:
    """The default options plus what the source needs (oneDNN's headers and library when it includes them)."""
    if _DNNL_INCLUDE not in source:
        return CompilerOptions()
    from backends.cpu import compiler_options_for, dnnl

    install = dnnl.installation()
    if install is None:
        raise RuntimeError("the kernel uses oneDNN, which is not installed here "
                           "(pip install onednn-cpu-gomp==2023.2.0 onednn-devel-cpu-gomp==2023.2.0)")
    needs = SimpleNamespace(libraries=dnnl.LIBRARIES(install), include_dirs=(install.include_dir,),
                            library_dirs=(install.lib_dir,))
    return compiler_options_for(needs)


def rebuild(source_path: str | Path) -> Path:
    from tfxla_plugin.flags import Flags

    source = Path(source_path).read_text()
    compiled = compile_shared_object(source, compiler_options(source), Flags.from_env().cache_dir,
                                     name=Path(source_path).stem)
    return compiled.path


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m tfxla_plugin.rebuild_kernel SOURCE.c", file=sys.stderr)
        return 2
    try:
        path = rebuild(args[0])
    except (OSError, RuntimeError, CompileError) as e:
        print(f"cannot rebuild {args[0]}: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
