"""The CUDA backend: HLO module -> CUDA C (all kernels in one source) -> fat binary (cached) -> ``Executable``.

    source = backends.cuda.emit_source(module)   # no GPU, no PyCUDA needed
    exe = backends.cuda.compile(module)          # nvcc runs here; PyCUDA only at the first call
    outputs = exe(*numpy_arrays)                 # list of arrays, the ROOT tuple flattened
    so = backends.cuda.compile_launcher(module)  # the same as a .so with the TfxlaLaunch kernel ABI

Nothing here imports PyCUDA at import time (the CPU path never loads it; the host launchers never use
it). ``docs/cuda.md`` describes the kernels, the host program, the launchers, the cache and the GPU
check script.
"""

from __future__ import annotations

from backends.codegen.errors import CodegenUnsupported
from backends.cuda.codegen import CodegenOptions, GeneratedModule, generate
from backends.cuda.compiler import NvccNotFound, NvccOptions, compile_fatbin
from backends.cuda.host_launcher import CompiledLauncher, LauncherOptions, compile_launcher, launcher_source
from backends.cuda.runtime import CompileOptions, CudaUnavailable, Executable, compile
from backends.toolchain import CompileError
from hlo.ir import HloModule


def emit_source(module: HloModule, options: CodegenOptions | None = None) -> str:
    """The CUDA C source of ``module``: every kernel, with its launch configuration in a comment above it."""
    return generate(module, options).source


__all__ = ["emit_source", "generate", "compile", "compile_fatbin", "Executable", "GeneratedModule",
           "CompileOptions", "CodegenOptions", "NvccOptions", "CodegenUnsupported", "CompileError",
           "CudaUnavailable", "NvccNotFound", "compile_launcher", "launcher_source", "LauncherOptions",
           "CompiledLauncher"]
