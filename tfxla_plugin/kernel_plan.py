"""Kernel plans: a cluster's kernel cached by what it is lowered from, so a warm process skips lowering, the
HLO pipeline and codegen (issue 19: a new process on a warm cache runs none of them, nor the C compiler).

A plan is what ``compile_cluster`` made of one cluster: the HLO as lowered and as optimized (as text,
parsed only when something reads them: ``explain``, ``ir``, TensorBoard), the fusion pass's decisions and
fusions and the backend's record of the kernel (``Backend.kernel_record``: for C the generated source,
signature, arena report and libraries). It lives in the kernel cache as ``<key>.plan`` (JSON) with its
sha256 record, written atomically under its key's lock and checked on every read
(``kernel_cache.write_cached``/``read_cached``), where ``key`` hashes everything lowering reads and
everything after it depends on:

* the cluster's GraphDef (deterministic serialization: its nodes, attrs and constant tensors' bytes), its
  function library, inputs (tensor, dtype, dims), outputs, name and the Python sources of its nodes
  (metadata in the HLO), and TensorFlow's version;
* ``PLAN_FORMAT`` and ``generator_version()``, a hash of every Python source under ``hlo/`` (lowering
  rules, passes) and ``backends/`` and of the compile driver: a changed rule, pass or emitter misses,
  with no constant to bump;
* the backend, ``--optimize`` and ``Backend.plan_facts()`` (the compiler, what ``-march=native`` means
  here, the CPU's features, oneDNN).

A hit rebuilds the kernel with ``Backend.restore``, which takes its shared object from the kernel cache
under the source's own key, exactly as a miss would (and builds it again if it was evicted): a plan
saves the Python work, never the checks on what is loaded. A cluster whose lowering raises stores
nothing (it raises again next time). Plans are cache entries like kernels: listed, evicted and cleared
by ``backends.cache_usage``. A backend whose ``plan_facts`` is None (CUDA) keeps none.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from backends import Backend, CompileOptions, Executable, kernel_cache
from hlo.ir import HloModule
from hlo.lowering import InputSpec
from hlo.passes.fusion import FusionDecision, FusionRecord
from hlo.text.parser import parse_module
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")

PLAN_FORMAT = "1"  # the record's layout (what ``store`` writes and ``load`` reads)
SUFFIX = ".plan"
_ROOT = Path(__file__).resolve().parent.parent
# The sources that decide what a lowered module compiles to: every pass, emitter and driver below.
GENERATOR_SOURCES = ("hlo", "backends", "tfxla_plugin/cluster_compiler.py", "tfxla_plugin/kernel_plan.py")


@dataclass(frozen=True)
class Plan:
    lowered: Callable[[], HloModule]  # the module as lowered; a restored plan parses its text on first use
    optimized: Callable[[], HloModule]  # after the backend's pipeline
    fusion_decisions: tuple[FusionDecision, ...]
    fusions: tuple[FusionRecord, ...]
    kernel: Executable
    record: dict | None = None  # what a restored plan was read from (``load``); None: just made

    @classmethod
    def made(cls, lowered: HloModule, optimized: HloModule, fusion_decisions: tuple[FusionDecision, ...],
             fusions: tuple[FusionRecord, ...], kernel: Executable) -> "Plan":
        """The plan of a cluster lowering, the pipeline and codegen just compiled."""
        return cls(lambda: lowered, lambda: optimized, fusion_decisions, fusions, kernel)

    @property
    def restored(self) -> bool:
        """Read back from the cache, not made by lowering, the pipeline and codegen."""
        return self.record is not None

    def lowered_text(self) -> str:
        return self.record["lowered_hlo"] if self.record is not None else self.lowered().to_text()

    def optimized_text(self) -> str:
        return self.record["optimized_hlo"] if self.record is not None else self.optimized().to_text()

    def lowered_instructions(self) -> int:
        return self.record["lowered_instructions"] if self.record is not None else \
            sum(1 for _ in self.lowered().instructions())


@functools.lru_cache(maxsize=1)
def generator_version() -> str:
    """sha256 of the paths and contents of every ``GENERATOR_SOURCES`` Python file, in path order."""
    files = []
    for name in GENERATOR_SOURCES:
        path = _ROOT / name
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    h = hashlib.sha256()
    for path in files:
        h.update(f"{path.relative_to(_ROOT)}\0".encode() + path.read_bytes() + b"\0")
    return h.hexdigest()


def graph_key(graph_def, inputs: Sequence[InputSpec], outputs: Sequence[str], name: str,
              sources: Mapping[str, tuple[str, int]] | None, library, backend: Backend, flags: Flags) -> str | None:
    """The key of the plan of the cluster ``lower_graph`` lowers from these arguments, on ``backend`` under
    ``flags``; None: the backend keeps no plans."""
    facts = backend.plan_facts()
    if facts is None or not hasattr(graph_def, "SerializeToString"):  # a list of NodeDefs: no plan
        return None
    import tensorflow as tf

    graph = hashlib.sha256(graph_def.SerializeToString(deterministic=True))
    if library is not None and library is not getattr(graph_def, "library", None):
        graph.update(b"\0library\0" + library.SerializeToString(deterministic=True))
    signature = json.dumps({"inputs": [[i.tensor, i.element_type.value, list(i.dims)] for i in inputs],
                            "outputs": list(outputs), "name": name,
                            "sources": sorted((k, list(v)) for k, v in (sources or {}).items())})
    return kernel_cache.cache_key(signature, [], PLAN_FORMAT, graph.hexdigest(), generator_version(), tf.__version__,
                                  backend.name, f"optimize={flags.optimize}", *facts)


def load(key: str, backend: Backend, options: CompileOptions, kernel_name: str) -> Plan | None:
    """The plan stored under ``key`` in ``options.cache_dir``, its kernel restored with ``options`` (its
    module renamed ``kernel_name``, as compiled); None when there is none, or when it cannot be read back
    (logged: the cluster is compiled again). Raises ``kernel_cache.UnsafeCacheError`` for a plan that
    changed after it was written."""
    data = kernel_cache.read_cached(key, cache_dir=options.cache_dir, suffix=SUFFIX)
    if data is None:
        return None
    try:
        record = json.loads(data)
        # parsing costs about twice what the pipeline did: only when something reads the modules
        lowered = functools.cache(lambda: parse_module(record["lowered_hlo"]))
        optimized = functools.cache(lambda: parse_module(record["optimized_hlo"]))
        decisions = tuple(FusionDecision(**d) for d in record["fusion_decisions"])
        fusions = tuple(FusionRecord(**{**f, "outputs": tuple(f["outputs"]), "members": tuple(f["members"])})
                        for f in record["fusions"])
        kernel = backend.restore(record["kernel"], lambda: dataclasses.replace(optimized(), name=kernel_name), options)
        int(record["lowered_instructions"])
    except (ValueError, KeyError, TypeError) as e:  # JSON or a record of another shape
        log.warning("kernel plan %s cannot be read back (%s: %s): compiling again", key, type(e).__name__, e)
        return None
    return Plan(lowered, optimized, decisions, fusions, kernel, record=record)


def store(key: str, plan: Plan, backend: Backend, flags: Flags) -> None:
    """Writes ``plan`` under ``key`` (atomically, with its record)."""
    record = {"format": PLAN_FORMAT, "lowered_hlo": plan.lowered_text(),
              "lowered_instructions": plan.lowered_instructions(), "optimized_hlo": plan.optimized_text(),
              "fusion_decisions": [dataclasses.asdict(d) for d in plan.fusion_decisions],
              "fusions": [dataclasses.asdict(f) for f in plan.fusions], "kernel": backend.kernel_record(plan.kernel)}
    kernel_cache.write_cached(key, json.dumps(record).encode(), cache_dir=flags.cache_dir, suffix=SUFFIX)
