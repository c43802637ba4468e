"""The CPU backend's side of symbolic dims (``tfxla_plugin/symbolic_dims.py`` drives them through
``Backend.symbolic``): how a probe is generated, and how the fitted source is compiled.

A probe is the ordinary C generator in probe mode (``backends.codegen.symbolic.probing``: every scratch
buffer a slot of its own, ABI markers), serial (no parallel loops: a symbolic kernel's symbols are
thread-local) and without oneDNN (its primitives are built for fixed sizes); the pipeline runs without
the passes whose kernels are valid only up to a size (``PROBE_DISABLED``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backends import Executable
from backends.codegen import symbolic
from hlo.ir import HloModule

NO_PARALLEL = 1 << 62  # the parallel threshold of a probe: every loop runs on the calling thread
# The CPU passes whose kernels hold a size-bounded part on the stack or in oneDNN (chosen for the sizes at
# hand, valid only up to a limit): symbolic kernels use the generic loops instead.
PROBE_DISABLED = frozenset({"row-programs", "dnnl-epilogues", "constant-folding"})


@dataclass
class Probe:
    source: str
    slots: list[int]  # the scratch allocations' sizes, in order
    signature: dict
    generated: object  # backends.cpu.codegen.GeneratedKernel


def generate_probe(optimized: HloModule) -> Probe:
    """``optimized`` (run through ``pipeline(disabled=PROBE_DISABLED)``) generated in probe mode."""
    from backends.cpu.codegen import CodegenOptions, generate

    with symbolic.probing() as slots:
        generated = generate(optimized, CodegenOptions(parallel_threshold=NO_PARALLEL, dnnl=False))
    return Probe(generated.source, list(slots.sizes), generated.signature, generated)


def compile_source(source: str, sig: dict, first: Probe, optimized: HloModule, cache_dir: str | None,
                   name: str) -> Executable:
    """The fitted symbolic ``source`` (signature ``sig``) compiled like the probe ``first`` it came from
    (its libraries and directories); raises ``backends.toolchain.CompileError``."""
    import backends.cpu as cpu
    from backends.cpu.codegen import GeneratedKernel
    from backends.toolchain import compile_shared_object

    g = first.generated
    generated = GeneratedKernel(source, sig, 0, {}, g.libraries, "", g.include_dirs, g.library_dirs)
    built = compile_shared_object(source, cpu.compiler_options_for(generated), cache_dir, name=name)
    native = cpu.Executable(optimized, generated, built.path, built.cache_hit, built.sha256)
    return Executable("cpu", Path(built.path), source, built.cache_hit, sig, "", native)
