"""The CPU backend: HLO module -> C source -> cached shared object -> callable ``Executable``.

    exe = backends.cpu.compile(module)   # the CPU's kernel-shape passes, then C, then gcc
    outputs = exe(*numpy_arrays)      # list of arrays, the ROOT tuple flattened
    print(exe.source)                 # the generated C
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from backends.codegen.errors import CodegenUnsupported
from backends.cpu.codegen import CodegenOptions, GeneratedKernel, generate
from backends.cpu.pipeline import prepare
from backends.cpu.runtime import Kernel, KernelError, KernelInvalidArgument
from backends.toolchain import CompileError, CompilerOptions, compile_shared_object
from hlo.ir import HloModule
from hlo.verifier import verify


@dataclass
class CompileOptions:
    codegen: CodegenOptions | None = None
    compiler: CompilerOptions | None = None
    cache_dir: str | None = None
    prepared: bool = False  # the module went through the CPU pipeline (or ``prepare``): compile it as given
    num_threads: int | None = None  # threads the kernel's parallel loops run on (None: every CPU it may use)
    jobs: int = 1  # gcc jobs compiling it (``CompilerOptions.jobs``) unless ``compiler`` sets them


class Executable:
    """A compiled module. The shared object is loaded into this process on first call only, so code
    that hands the kernel to the TfxlaLaunch op never maps it twice."""

    def __init__(self, module: HloModule | Callable[[], HloModule], generated: GeneratedKernel, path,
                 cache_hit: bool, sha256: str = "", num_threads: int | None = None):
        self._module = module  # a restored kernel plan's is parsed on first use (``module``)
        self.generated = generated
        self.path = path
        self.cache_hit = cache_hit
        self.sha256 = sha256  # of the shared object: what loading it checks
        self.num_threads = num_threads  # threads of its parallel loops (``Kernel``; None: every CPU it may use)
        self._kernel: Kernel | None = None

    @property
    def module(self) -> HloModule:
        """The module compiled (after the CPU's kernel-shape passes)."""
        if callable(self._module):
            self._module = self._module()
        return self._module

    @property
    def kernel(self) -> Kernel:
        if self._kernel is None:
            self._kernel = Kernel(self.path, self.sha256 or None, self.num_threads)
        return self._kernel

    @property
    def source(self) -> str:
        return self.generated.source

    def __call__(self, *args):
        return self.kernel.run(*args)


def compiler_options_for(generated: GeneratedKernel, compiler: CompilerOptions | None = None) -> CompilerOptions:
    """``compiler`` (default options if None) plus the libraries and paths the generated source needs."""
    compiler = compiler or CompilerOptions()
    if generated.libraries or generated.include_dirs or generated.library_dirs:
        compiler = dataclasses.replace(
            compiler, libraries=compiler.libraries + tuple(f"-l{lib}" for lib in generated.libraries),
            include_dirs=compiler.include_dirs + generated.include_dirs,
            library_dirs=compiler.library_dirs + generated.library_dirs)
    return compiler


def compile(module: HloModule, options: CompileOptions | None = None) -> Executable:  # noqa: A001
    """Verify ``module``, run the CPU's kernel-shape passes on it (``pipeline.prepare``: which reduces are
    column reductions, what oneDNN computes of each output fusion) unless ``options.prepared``, generate C
    and compile it (the kernel cache). The ``Executable`` keeps the module it compiled."""
    options = options or CompileOptions()
    verify(module)
    if not options.prepared:
        module = prepare(module)
    return build(module, generate(module, options.codegen), options)


def build(module: HloModule | Callable[[], HloModule], generated: GeneratedKernel,
          options: CompileOptions | None = None) -> Executable:
    """The shared object of ``generated`` (the kernel cache) as an ``Executable`` of ``module``: what
    ``compile`` ends with, and all a kernel plan hit runs (``tfxla_plugin/kernel_plan.py``: no codegen)."""
    options = options or CompileOptions()
    compiler = compiler_options_for(generated, options.compiler)
    if options.jobs > 1 and compiler.jobs == 1:
        compiler = dataclasses.replace(compiler, jobs=options.jobs)
    compiled = compile_shared_object(generated.source, compiler, options.cache_dir,
                                     name=generated.signature["module"])
    return Executable(module, generated, compiled.path, compiled.cache_hit, compiled.sha256, options.num_threads)


__all__ = ["build", "compile", "Executable", "CompileOptions", "CodegenOptions", "CompilerOptions", "CompileError",
           "CodegenUnsupported", "KernelError", "KernelInvalidArgument"]
