"""backends: the code generators a cluster can be compiled with, behind one ``Backend`` protocol.

Every backend turns an optimized HLO module into a shared object with the kernel ABI of the TfxlaLaunch
op (``tfxla_plugin/ops/tfxla_launch.cc``), so the graph rewrite, batch tiling, the launch op and
SavedModel wrapping are the same for all of them; they ask a ``Backend`` (``get(name)``), never a
backend by name. Each backend package supplies its object in ``backends/<name>/backend.py``
(``BACKEND``), found through ``_REGISTRY`` and imported on first use: importing ``backends`` imports
no backend, and nothing here imports PyCUDA.

A backend says:

* ``name``, ``source_suffix`` (its stored kernel source: a dump, a wrapped SavedModel's asset) and
  ``source_language`` (how a viewer highlights it);
* ``check()``: raises a clear error before anything is traced or compiled when the toolchain is missing
  (the CUDA backend needs nvcc; running needs a GPU, which the kernel's ``tfxla_init`` reports);
* ``pipeline(**options)``: its own HLO pass pipeline (``backends/<name>/pipeline.py``) bound to options;
* ``prepare(module, **options)``: its kernel-shape passes alone (the last passes of its pipeline, which
  annotate how it emits a kernel, ``hlo/annotations.py``): what a module that skipped the pipeline
  (``--optimize=false``) still goes through, since the code generator decides no kernel shape itself;
* ``compile(module, options) -> Executable``: the kernel, built into the kernel cache. It runs ``prepare``
  first unless ``CompileOptions(prepared=True)`` says the module went through the pipeline (or
  ``prepare``) already, so a module compiled as it is (an XLA dump) gets the kernels the API would give it;
* ``rebuild_command(source)``: how a stored kernel source is compiled again where it is loaded, and what
  it links against: an argv whose elements ``SOURCE`` and ``OUTPUT`` stand for the source and the shared
  object. A wrapped SavedModel records it; the launch op runs it itself (no shell, no interpreter) when
  a shipped kernel cannot be used on the machine that loads it (``tfxla_plugin/ops/rebuild.h``);
* ``target_features()``: the CPU features the shared objects were built for (``-march=native`` C);
* ``plan_facts()``, ``kernel_record(kernel)``, ``restore(record, module, options)``: kernel plans
  (``tfxla_plugin/kernel_plan.py``): what besides the HLO decides its kernels (part of a plan's key),
  a JSON-able record of a kernel, and the kernel rebuilt from it without its pipeline or codegen.
  ``BackendBase``'s ``plan_facts`` is None: that backend keeps no plans.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from hlo.ir import HloModule

# The placeholders of ``Backend.rebuild_command``: whole argv elements the launch op replaces by the path
# of the source it copied into its private build directory and of the shared object to build there.
SOURCE = "{source}"
OUTPUT = "{output}"

DEFAULT = "cpu"

# name -> the module whose ``BACKEND`` is that backend (imported by ``get``, on first use).
_REGISTRY: dict[str, str] = {
    "cpu": "backends.cpu.backend",
    "cuda": "backends.cuda.backend",
}
_loaded: dict[str, "Backend"] = {}


@dataclass(frozen=True)
class CompileOptions:
    cache_dir: str | None = None  # the kernel cache (None: ``backends.kernel_cache.default_cache_dir``)
    prepared: bool = False  # the module went through ``pipeline`` or ``prepare``: compile runs no pass
    jobs: int = 1  # native compiler jobs for this kernel (``toolchain.CompilerOptions.jobs``), where it has any


@dataclass(frozen=True)
class Executable:
    """A compiled kernel: its shared object, the source compiled, and the backend's own object."""

    backend: str
    path: Path
    source: str
    cache_hit: bool
    signature: dict
    buffer_assignment: str  # the CPU arena report, or the CUDA host program with its device arena
    native: object  # backends.cpu.Executable, or backends.cuda.host_launcher.CompiledLauncher


@dataclass(frozen=True)
class HloPipeline:
    """A backend's HLO pipeline bound to its options (the pipeline module's ``OptimizeOptions``)."""

    backend: str
    options: Any
    module: Any  # backends/<name>/pipeline.py

    def run(self, module: "HloModule") -> tuple["HloModule", list]:
        """The optimized module and the pass objects that ran (the fusion pass keeps its decisions)."""
        return self.module.optimize_with_passes(module, self.options)

    def prepare(self, module: "HloModule") -> "HloModule":
        """The backend's kernel-shape passes alone (``backends/<name>/pipeline.py``'s ``prepare``)."""
        return self.module.prepare(module, self.options)


@runtime_checkable
class Backend(Protocol):
    name: str
    source_suffix: str
    source_language: str

    def check(self) -> None: ...

    def pipeline(self, **options) -> HloPipeline: ...

    def prepare(self, module: "HloModule", **options) -> "HloModule": ...

    def compile(self, module: "HloModule", options: CompileOptions | None = None) -> Executable: ...

    def rebuild_command(self, source: str) -> list[str]: ...

    def target_features(self) -> tuple[str, ...]: ...


class BackendBase:
    """What every backend shares: its pipeline module bound to options, no toolchain check, no features."""

    name = ""
    source_suffix = ""
    source_language = ""
    pipeline_module = ""  # e.g. "backends.cpu.pipeline"
    # symbolic dims (tfxla_plugin/symbolic_dims.py): a module with PROBE_DISABLED, generate_probe and
    # compile_source (backends/cpu/symbolic_kernels.py), or None where the backend generates none
    symbolic = None

    def check(self) -> None:
        return None

    def pipeline(self, **options) -> HloPipeline:
        module = importlib.import_module(self.pipeline_module)
        return HloPipeline(self.name, module.OptimizeOptions(**options), module)

    def prepare(self, module: "HloModule", **options) -> "HloModule":
        return self.pipeline(**options).prepare(module)

    def target_features(self) -> tuple[str, ...]:
        return ()

    # Kernel plans (``tfxla_plugin/kernel_plan.py``): a backend that can rebuild its ``Executable`` from a
    # record, without its pipeline or codegen, says what besides the HLO and the generator decides it.
    def plan_facts(self) -> tuple[str, ...] | None:
        """What decides this backend's kernels besides the module and the generator's sources (compiler
        identity, target, libraries): part of a plan's key. None: this backend keeps no plans."""
        return None

    def kernel_record(self, kernel: Executable) -> dict:
        """A JSON-able record of ``kernel`` from which ``restore`` rebuilds it."""
        raise NotImplementedError(f"backend {self.name} keeps no kernel plans")

    def restore(self, record: dict, module: "HloModule | Callable[[], HloModule]",
                options: CompileOptions | None = None) -> Executable:
        """The ``Executable`` ``record`` (``kernel_record``) describes, for ``module`` as optimized (or a
        function returning it, called when the module is first needed)."""
        raise NotImplementedError(f"backend {self.name} keeps no kernel plans")

    def __repr__(self) -> str:
        return f"<backend {self.name}>"


def names() -> tuple[str, ...]:
    """The registered backends' names (``--backend``), without importing any of them."""
    return tuple(_REGISTRY)


def get(name: str) -> Backend:
    """The backend called ``name``, imported on first use; ValueError naming the known ones otherwise."""
    backend = _loaded.get(name)
    if backend is not None:
        return backend
    module = _REGISTRY.get(name) if isinstance(name, str) else None
    if module is None:
        raise ValueError(f"backend must be one of {', '.join(map(repr, _REGISTRY))}, got {name!r}")
    backend = importlib.import_module(module).BACKEND
    return _loaded.setdefault(name, backend)


def all_backends() -> list[Backend]:
    """Every registered backend (imports each)."""
    return [get(name) for name in _REGISTRY]


__all__ = ["Backend", "BackendBase", "CompileOptions", "DEFAULT", "Executable", "HloPipeline", "OUTPUT", "SOURCE",
           "all_backends", "get", "names"]
