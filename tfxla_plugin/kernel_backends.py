"""The code generators a cluster can be compiled with, one row each in ``BACKENDS`` (``--backend``).

Every backend turns an optimized HLO module into a shared object with the kernel ABI of the TfxlaLaunch
op (``tfxla_plugin/ops/tfxla_launch.cc``), so the graph rewrite, batch tiling, the launch op and
SavedModel wrapping are the same for all of them. A row says:

* ``check()``: raises a clear error before anything is traced or compiled when the toolchain is missing
  (the CUDA backend needs nvcc; running needs a GPU, which the kernel's ``tfxla_init`` reports);
* ``build(module, cache_dir)``: compile into the kernel cache, returning a ``BuiltKernel``;
* ``source_suffix``: how the kernel's stored source is named (a dump, a wrapped SavedModel's asset), and
  ``rebuild(path, text, cache_dir)`` compiles such a stored source (``text``, read from ``path``) again
  (``tfxla_plugin.rebuild_kernel``);
* ``op_rebuilds``: whether the launch op itself rebuilds an unusable kernel from the source beside it
  (``<kernel>.c`` or ``<kernel>.cu``, through ``tfxla_plugin.rebuild_kernel``); a wrapped model then
  records the source hashes, otherwise none, and the op refuses a kernel whose hash changed;
* ``target_features()``: the CPU features the shared objects were built for (``-march=native`` C).

The CUDA backend's kernels are host launchers (``backends/cuda/host_launcher.py``): with TensorFlow's
tensors in host memory, each call copies the inputs to the device and the outputs back. Importing this
module imports neither backend; nothing here imports PyCUDA.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

from hlo.ir import HloModule


@dataclass(frozen=True)
class BuiltKernel:
    """A compiled kernel: its shared object, the source compiled, and the backend's own executable object."""

    backend: str
    path: Path
    source: str
    cache_hit: bool
    signature: dict
    buffer_assignment: str  # the CPU arena report, or the CUDA host program with its device arena
    executable: object  # backends.cpu.Executable, or backends.cuda.host_launcher.CompiledLauncher


@dataclass(frozen=True)
class KernelBackend:
    name: str
    source_suffix: str
    check: Callable[[], None]
    build: Callable[[HloModule, "str | None"], BuiltKernel]
    rebuild: Callable[[str, str, "str | None"], Path]
    op_rebuilds: bool
    target_features: Callable[[], tuple[str, ...]]


# --- cpu ---------------------------------------------------------------------------------------

_DNNL_INCLUDE = '#include "oneapi/dnnl/dnnl.h"'


def cpu_rebuild_options(source: str):
    """The default C compiler options plus what ``source`` needs (oneDNN's headers and library)."""
    from backends.cpu.compiler import CompilerOptions

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


def _cpu_build(module: HloModule, cache_dir: str | None) -> BuiltKernel:
    import backends.cpu as cpu

    exe = cpu.compile(module, cpu.CompileOptions(cache_dir=cache_dir))
    return BuiltKernel("cpu", Path(exe.path), exe.source, exe.cache_hit, exe.generated.signature,
                       exe.generated.buffer_assignment, exe)


def _cpu_rebuild(source_path: str, source: str, cache_dir: str | None) -> Path:
    from backends.cpu.compiler import compile_shared_object

    return compile_shared_object(source, cpu_rebuild_options(source), cache_dir, name=Path(source_path).stem).path


def _cpu_features() -> tuple[str, ...]:
    from backends.cpu.target import target_features

    return tuple(target_features())


# --- cuda --------------------------------------------------------------------------------------

def _cuda_check() -> None:
    from backends.cuda.compiler import require_nvcc

    require_nvcc()


def _cuda_build(module: HloModule, cache_dir: str | None) -> BuiltKernel:
    from backends.cuda.host_launcher import LauncherOptions, compile_launcher

    compiled = compile_launcher(module, LauncherOptions(cache_dir=cache_dir))
    program = compiled.generated.program
    assignment = (f"device scratch arena: {program.scratch_bytes} bytes (offsets below are into it)\n"
                  f"host program:\n{compiled.generated.program_text}\n")
    return BuiltKernel("cuda", Path(compiled.path), compiled.source, compiled.cache_hit, compiled.signature,
                       assignment, compiled)


def _cuda_rebuild(source_path: str, source: str, cache_dir: str | None) -> Path:
    from backends.cuda.host_launcher import build_launcher

    return build_launcher(source, cache_dir=cache_dir, name=Path(source_path).stem).path


BACKENDS: dict[str, KernelBackend] = {
    "cpu": KernelBackend("cpu", ".c", check=lambda: None, build=_cpu_build, rebuild=_cpu_rebuild, op_rebuilds=True,
                         target_features=_cpu_features),
    "cuda": KernelBackend("cuda", ".cu", check=_cuda_check, build=_cuda_build, rebuild=_cuda_rebuild,
                          op_rebuilds=True, target_features=lambda: ()),
}


def get(name: str) -> KernelBackend:
    backend = BACKENDS.get(name)
    if backend is None:
        raise ValueError(f"backend must be one of {', '.join(map(repr, BACKENDS))}, got {name!r}")
    return backend


def for_source(path: str | os.PathLike) -> KernelBackend:
    """The backend whose stored sources end like ``path`` (``.c``, ``.cu``)."""
    suffix = Path(path).suffix
    for backend in BACKENDS.values():
        if backend.source_suffix == suffix:
            return backend
    known = ", ".join(b.source_suffix for b in BACKENDS.values())
    raise ValueError(f"{path}: not a kernel source (expected a file ending in {known})")
