"""The CPU backend's ``Backend`` object (``backends.get("cpu")``): C kernels compiled with gcc, oneDNN
where a kernel calls it, the CPU pipeline (``backends/cpu/pipeline.py``)."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Callable, cast

from backends import OUTPUT, SOURCE, BackendBase, CompileOptions, Executable
from hlo.ir import HloModule

if TYPE_CHECKING:
    from backends.toolchain import CompilerOptions

_DNNL_INCLUDE = '#include "oneapi/dnnl/dnnl.h"'


def rebuild_options(source: str) -> "CompilerOptions":
    """The default C compiler options plus what ``source`` needs (oneDNN's headers and library)."""
    from backends.cpu import compiler_options_for, dnnl
    from backends.cpu.codegen import GeneratedKernel
    from backends.toolchain import CompilerOptions

    if _DNNL_INCLUDE not in source:
        return CompilerOptions()
    install = dnnl.installation()
    if install is None:
        raise RuntimeError(f"the kernel uses oneDNN, which is not installed here ({dnnl.INSTALL})")
    # what compiler_options_for reads of a GeneratedKernel: the libraries and directories it needs
    needs = SimpleNamespace(libraries=dnnl.LIBRARIES(install), include_dirs=(install.include_dir,),
                            library_dirs=(install.lib_dir,))
    return compiler_options_for(cast(GeneratedKernel, needs))


class CpuBackend(BackendBase):
    name = "cpu"
    source_suffix = ".c"
    source_language = "c"
    pipeline_module = "backends.cpu.pipeline"

    @property
    def symbolic(self):
        """Symbolic dims' probe generation and compile (``backends/cpu/symbolic_kernels.py``)."""
        from backends.cpu import symbolic_kernels
        return symbolic_kernels

    def compile(self, module: HloModule, options: CompileOptions | None = None) -> Executable:
        import backends.cpu as cpu

        options = options or CompileOptions()
        return self._executable(cpu.compile(module, cpu.CompileOptions(cache_dir=options.cache_dir,
                                                                        prepared=options.prepared, jobs=options.jobs)))

    def plan_facts(self) -> tuple[str, ...]:
        """The C compiler (default command, version, what ``-march=native`` resolves to), the CPU's ISA
        features and the oneDNN install (found or not, its version and runtime) codegen generates for."""
        from backends.cpu import dnnl
        from backends.toolchain import CompilerOptions, compiler_version, native_target

        cc = CompilerOptions()
        return (shlex.join(cc.command("SOURCE.c", "OUTPUT.so")), compiler_version(cc.cc),
                native_target(cc.cc, cc.target_flags), ",".join(self.target_features()), repr(dnnl.installation()))

    def kernel_record(self, kernel: Executable) -> dict:
        """What ``restore`` needs of ``kernel`` (its ``GeneratedKernel``: source, signature, arena, libraries)."""
        return dataclasses.asdict(kernel.native.generated)

    def restore(self, record: dict, module: HloModule | Callable[[], HloModule],
                options: CompileOptions | None = None) -> Executable:
        """The kernel ``record`` describes, as ``compile`` of ``module`` made it, without generating it again:
        its shared object from the kernel cache (built there again if it was evicted)."""
        import backends.cpu as cpu
        from backends.cpu.codegen import GeneratedKernel

        options = options or CompileOptions()
        lists = {k: tuple(v) for k, v in record.items() if isinstance(v, list)}
        exe = cpu.build(module, GeneratedKernel(**{**record, **lists}),
                        cpu.CompileOptions(cache_dir=options.cache_dir, jobs=options.jobs))
        return self._executable(exe)

    def _executable(self, exe) -> Executable:
        return Executable(self.name, Path(exe.path), exe.source, exe.cache_hit, exe.generated.signature,
                          exe.generated.buffer_assignment, exe)

    def rebuild_command(self, source: str) -> list[str]:
        """gcc with this backend's flags (``-march=native``: built for the CPU that rebuilds it), and oneDNN's
        include and library directories (found here, at wrap time) when the source calls oneDNN."""
        return rebuild_options(source).command(SOURCE, OUTPUT)

    def target_features(self) -> tuple[str, ...]:
        from backends.cpu.target import target_features

        return tuple(target_features())


BACKEND = CpuBackend()
