"""Compiling one extracted cluster: lower to HLO, optimize, generate and compile the kernel.

``compile_cluster`` returns a ``CompiledCluster``: the HLO as lowered and as optimized, the kernel
(source, buffer assignment, ``.so`` path and hash) and the fusion pass's decisions (the refused ones
say why two instructions were not fused; ``tfxla_plugin.explain`` shows them). The kernel is built by
the backend ``flags.backend`` names (``backends.get``: C for ``cpu``, a CUDA host launcher for ``cuda``),
after that backend's own HLO pipeline (``Backend.pipeline``; with ``--optimize=false`` its kernel-shape
passes alone, ``Backend.prepare``), and compiled with ``CompileOptions(prepared=True)``: the passes run
once. It logs one INFO line per compiled cluster on the ``tfxla_plugin`` logger. A cluster compiled
before (by any process on this kernel cache) comes back from its kernel plan (``kernel_plan``): no
lowering, HLO pass, codegen or C compiler run; its modules are parsed from text when first read.

With ``TFXLA_FLAGS=--dump_to=DIR`` it writes XLA-style dumps, per compiled module
(``NNNN`` counts modules compiled in this process, ``<name>`` is the cluster name):

    DIR/module_NNNN.<name>.before_optimizations.txt    HLO as lowered
    DIR/module_NNNN.<name>.after_optimizations.txt     HLO after the pipeline (what the code generator saw)
    DIR/module_NNNN.<name>.buffer-assignment.txt       the code generator's buffer arena
    DIR/module_NNNN.<name>.c                           the generated kernel source (.cu for --backend=cuda),
                                                       after a header naming the cluster and its inputs' HLO
                                                       parameters (``source_header``: the source itself names
                                                       neither, see ``KERNEL_MODULE_NAME``)
    DIR/module_NNNN.<name>.fusion_decisions.txt        every fusion the pass made and every pair it refused
    DIR/module_NNNN.<name>.KKKK.after_<pass>.txt       with --dump_passes: after each HLO pass that changed
                                                       the module (KKKK counts passes in run order)

Every ``.txt`` dump except the buffer assignment and fusion decisions is HLO text that
``hlo.parse_module`` reads back. (The clustered GraphDef ``<function>.clustered_graph.pbtxt`` is written
by ``compiled_graph``.)
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import backends
from backends import Backend, CompileOptions, Executable, cache_usage
from hlo.ir import HloModule
from hlo.lowering import InputSpec, InvalidArgumentLoweringError, lower_graph
from hlo.passes.fusion import FusionDecision, FusionPass, FusionRecord
from hlo.passes.fusion import render as render_fusion
from tfxla_plugin import kernel_plan
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")
_module_counter = itertools.count()

# Every cluster's kernel is generated from a copy of its optimized module under this one name: the kernel's
# source is its cache key and must not depend on the cluster's name (``cluster_3``, ``..._b4``), so
# structurally identical clusters (of two models, of one model built twice) share one kernel. The
# cluster's name and its parameters' names stay in the HLO dumps, ``explain`` and the dumped source's
# header (``source_header``), which is not part of the compiled text.
KERNEL_MODULE_NAME = "cluster"


@dataclass
class CompiledCluster:
    name: str
    _hlo: HloModule | Callable[[], HloModule]  # ``hlo``; a kernel plan's parses on first use
    _optimized: HloModule | Callable[[], HloModule]  # ``optimized``, likewise
    kernel: Executable
    kernel_path: str
    kernel_hash: str
    compile_seconds: float
    cache_hit: bool
    fusion_decisions: tuple[FusionDecision, ...] = ()  # in the order the fusion pass made them
    fusions: tuple[FusionRecord, ...] = ()  # the fusion instructions it created
    plan_hit: bool = False  # the optimized HLO and kernel came from a kernel plan (``kernel_plan``): no codegen

    @property
    def hlo(self) -> HloModule:
        """The module as lowered."""
        if callable(self._hlo):
            self._hlo = self._hlo()
        return self._hlo

    @property
    def optimized(self) -> HloModule:
        """The module after the backend's pipeline: what the code generator saw."""
        if callable(self._optimized):
            self._optimized = self._optimized()
        return self._optimized

    @property
    def backend(self) -> str:
        return self.kernel.backend

    @property
    def executable(self):
        """The backend's own object (``backends.cpu.Executable``, ``host_launcher.CompiledLauncher``)."""
        return self.kernel.native

    @property
    def c_source(self) -> str:
        """The kernel's source as compiled: C, or for ``cuda`` the launcher's CUDA (kernels and host code)."""
        return self.kernel.source

    @property
    def signature(self) -> dict:
        return self.kernel.signature

    @property
    def buffer_assignment(self) -> str:
        return self.kernel.buffer_assignment

    @property
    def refused_fusions(self) -> list[FusionDecision]:
        return [d for d in self.fusion_decisions if not d.fused]

    def fusion_text(self, refused_only: bool = False) -> str:
        """The fusion log as text (``hlo.passes.fusion.render``)."""
        return render_fusion(list(self.fusion_decisions), list(self.fusions), refused_only)


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dump_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text)


def source_header(name: str, module: HloModule) -> str:
    """The comment the dumped kernel source starts with (not compiled, not hashed): the cluster, and the
    HLO parameter each input of the kernel's ABI is."""
    inputs = "".join(f"\n   input {p.parameter_number}: %{p.name} {p.shape}" for p in module.entry.parameters)
    return (f"/* tfxla cluster {name}: HLO module {module.name}, generated as module {KERNEL_MODULE_NAME}{inputs}\n"
            f"   (the kernel's source names no cluster or TF node: its cache key is its content) */\n")


def optimize_with_decisions(module: HloModule, backend: Backend,
                            dump: Callable[[int, str, HloModule], None] | None = None
                            ) -> tuple[HloModule, FusionPass | None]:
    """``backend``'s own HLO pipeline, also returning the fusion pass (its ``decisions``/``fusions``)."""
    result, passes = backend.pipeline(dump=dump).run(module)
    return result, next((p for p in passes if isinstance(p, FusionPass)), None)


class _Dumper:
    """Writes one module's dump files under ``DIR/module_NNNN.<name>``."""

    def __init__(self, directory: str, name: str, passes: bool):
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.prefix = f"module_{next(_module_counter):04d}.{_dump_name(name)}"
        self.path = path
        self.passes = passes
        self._steps = itertools.count(1)

    def write(self, suffix: str, text: str) -> None:
        (self.path / f"{self.prefix}.{suffix}").write_text(text)

    def after_pass(self, _step: int, pass_name: str, module: HloModule) -> None:
        # A running count rather than the pipeline's step: fixed-point rounds rerun the same steps.
        if self.passes:
            self.write(f"{next(self._steps):04d}.after_{_dump_name(pass_name)}.txt", module.to_text())


def _optimize_and_generate(module: HloModule, backend: Backend, flags: Flags, options: CompileOptions,
                           dumper: _Dumper | None) -> kernel_plan.Plan:
    """The backend's pipeline (or its kernel-shape passes alone, ``--optimize=false``) and its kernel."""
    fusion = None
    dump = dumper.after_pass if dumper is not None else None
    if flags.optimize:
        optimized, fusion = optimize_with_decisions(module, backend, dump)
    else:  # the backend's kernel-shape passes choose its kernels: not an optimization to skip
        optimized = backend.prepare(module, dump=dump)
    kernel = backend.compile(dataclasses.replace(optimized, name=KERNEL_MODULE_NAME), options)
    return kernel_plan.Plan.made(module, optimized, tuple(fusion.decisions) if fusion is not None else (),
                                 tuple(fusion.fusions) if fusion is not None else (), kernel)


def compile_jobs(flags: Flags, concurrent: int = 1) -> int:
    """C compiler jobs for one kernel while ``concurrent`` compile at once (``--compile_jobs``; 0: shared out)."""
    from backends.toolchain import default_jobs

    return flags.compile_jobs if flags.compile_jobs > 0 else default_jobs(concurrent)


def compile_cluster(name: str, graph_def, inputs: list[InputSpec], outputs: list[str], flags: Flags,
                    sources: dict | None = None, library=None, concurrent: int = 1) -> CompiledCluster:
    """``concurrent``: how many clusters compile at the same time (sharing the CPUs' compiler jobs)."""
    backend = backends.get(flags.backend)
    backend.check()
    start = time.perf_counter()
    key = None if flags.dump_passes else \
        kernel_plan.graph_key(graph_def, inputs, outputs, name, sources, library, backend, flags)  # dumps: no plan
    options = CompileOptions(cache_dir=flags.cache_dir, prepared=True, jobs=compile_jobs(flags, concurrent))
    plan = kernel_plan.load(key, backend, options, KERNEL_MODULE_NAME) if key is not None else None
    if plan is None:
        try:
            module = lower_graph(graph_def, inputs, outputs, name=name, sources=sources, library=library)
        except InvalidArgumentLoweringError as e:  # TF's kernel rejects these inputs the same way at run time
            import tensorflow as tf
            raise tf.errors.InvalidArgumentError(None, None, str(e)) from e
    dumper = _Dumper(flags.dump_to, name, flags.dump_passes) if flags.dump_to else None
    if dumper is not None:
        dumper.write("before_optimizations.txt", plan.lowered_text() if plan is not None else module.to_text())
    if plan is None:
        plan = _optimize_and_generate(module, backend, flags, options, dumper)
        if key is not None:
            kernel_plan.store(key, plan, backend, flags)
        if not plan.kernel.cache_hit or key is not None:  # the cache grew: keep it under its limit
            cache_usage.evict(flags.cache_dir, flags.cache_max_bytes,
                              keep={Path(plan.kernel.path).name[:64], key or ""})  # never what this made
    kernel, decisions, fusions = plan.kernel, plan.fusion_decisions, plan.fusions
    if dumper is not None:
        dumper.write("after_optimizations.txt", plan.optimized_text())
        dumper.write(backend.source_suffix[1:], source_header(name, plan.optimized()) + kernel.source)
        dumper.write("buffer-assignment.txt", kernel.buffer_assignment)
        dumper.write("fusion_decisions.txt", render_fusion(list(decisions), list(fusions)))
    path = str(kernel.path)
    seconds = time.perf_counter() - start
    n_ops = plan.lowered_instructions()
    how = "hit (plan: no lowering, HLO passes or codegen)" if plan.restored else "hit" if kernel.cache_hit else "miss"
    log.info("compiled cluster %s: %d HLO ops, %.3f s, %s kernel cache %s", name, n_ops, seconds, backend.name, how)
    return CompiledCluster(name, plan.lowered, plan.optimized, kernel, path, sha256_file(path), seconds,
                           kernel.cache_hit, fusion_decisions=decisions, fusions=fusions, plan_hit=plan.restored)
