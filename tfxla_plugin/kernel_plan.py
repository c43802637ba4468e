"""Kernel plans: a cluster's kernel cached by its lowered HLO, so a warm process skips the HLO pipeline and
codegen (issue 19: a new process on a warm cache runs neither, nor the C compiler).

A plan is what ``compile_cluster`` made of one lowered module: the optimized HLO (as text), the fusion
pass's decisions and fusions (``explain``, the dumps) and the backend's record of the kernel
(``Backend.kernel_record``: for C the generated source, signature, arena report and libraries). It lives
in the kernel cache as ``<key>.plan`` (JSON) with its sha256 record, written atomically under its key's
lock and checked on every read (``kernel_cache.write_cached``/``read_cached``), where ``key`` hashes:

* the lowered module's HLO text, metadata included (the plan names its instructions in dumps and
  ``explain``), and the bytes of its constants (the text keeps a float's value, not a NaN's payload);
* ``PLAN_FORMAT`` and ``generator_version()``, a hash of every Python source under ``hlo/`` and
  ``backends/`` and of the compile driver: a changed pass or emitter misses, with no constant to bump;
* the backend, ``--optimize`` and ``Backend.plan_facts()`` (the compiler, what ``-march=native`` means
  here, the CPU's features, oneDNN).

A hit rebuilds the kernel with ``Backend.restore``, which takes its shared object from the kernel cache
under the source's own key, exactly as a miss would (and builds it again if it was evicted): a plan
saves the pipeline and codegen, never the checks on what is loaded. Plans are cache entries like
kernels: listed, evicted and cleared by ``backends.cache_usage``. A backend whose ``plan_facts`` is
None (CUDA) keeps none.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from backends import Backend, CompileOptions, Executable, kernel_cache
from hlo.ir import HloModule
from hlo.literal import Literal
from hlo.opcodes import Opcode
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
    optimized: Callable[[], HloModule]  # the optimized module; a restored plan parses its text on first use
    text: str | None  # its HLO text, as stored (None: not stored yet, ``optimized_text``)
    fusion_decisions: tuple[FusionDecision, ...]
    fusions: tuple[FusionRecord, ...]
    kernel: Executable
    restored: bool = False  # read back from the cache (``load``), not made by the pipeline and codegen

    @classmethod
    def made(cls, optimized: HloModule, fusion_decisions: tuple[FusionDecision, ...],
             fusions: tuple[FusionRecord, ...], kernel: Executable) -> "Plan":
        """The plan of a module the pipeline and codegen just compiled."""
        return cls(lambda: optimized, None, fusion_decisions, fusions, kernel)

    def optimized_text(self) -> str:
        return self.text if self.text is not None else self.optimized().to_text()


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


def _literal_bytes(h, lit: Literal) -> None:
    if lit.elements is not None:
        for element in lit.elements:
            _literal_bytes(h, element)
    elif lit.array is not None:
        h.update(f"{lit.array.dtype.str}{lit.array.shape}".encode() + lit.array.tobytes())


def plan_key(module: HloModule, backend: Backend, flags: Flags) -> str | None:
    """The key of ``module``'s plan (as lowered) on ``backend`` under ``flags``; None: the backend keeps none."""
    facts = backend.plan_facts()
    if facts is None:
        return None
    constants = hashlib.sha256()
    for _, inst in module.instructions():
        if inst.opcode is Opcode.CONSTANT and inst.literal is not None:
            constants.update(inst.name.encode() + b"\0")
            _literal_bytes(constants, inst.literal)
    return kernel_cache.cache_key(module.to_text(), [], PLAN_FORMAT, generator_version(), backend.name,
                                  f"optimize={flags.optimize}", constants.hexdigest(), *facts)


def load(key: str, backend: Backend, options: CompileOptions, kernel_name: str) -> Plan | None:
    """The plan stored under ``key`` in ``options.cache_dir``, its kernel restored with ``options`` (its
    module renamed ``kernel_name``, as compiled);
    None when there is none, or when it cannot be read back (logged: the cluster is compiled again).
    Raises ``kernel_cache.UnsafeCacheError`` for a plan that changed after it was written."""
    data = kernel_cache.read_cached(key, cache_dir=options.cache_dir, suffix=SUFFIX)
    if data is None:
        return None
    try:
        record = json.loads(data)
        text = record["optimized_hlo"]
        optimized = functools.cache(lambda: parse_module(text))  # ~2x the pipeline's time: only when used
        decisions = tuple(FusionDecision(**d) for d in record["fusion_decisions"])
        fusions = tuple(FusionRecord(**{**f, "outputs": tuple(f["outputs"]), "members": tuple(f["members"])})
                        for f in record["fusions"])
        kernel = backend.restore(record["kernel"], lambda: dataclasses.replace(optimized(), name=kernel_name), options)
    except (ValueError, KeyError, TypeError) as e:  # JSON, HLO text or a record of another shape
        log.warning("kernel plan %s cannot be read back (%s: %s): compiling again", key, type(e).__name__, e)
        return None
    return Plan(optimized, text, decisions, fusions, kernel, restored=True)


def store(key: str, plan: Plan, backend: Backend, flags: Flags) -> None:
    """Writes ``plan`` under ``key`` (atomically, with its record)."""
    record = {"format": PLAN_FORMAT, "optimized_hlo": plan.optimized_text(),
              "fusion_decisions": [dataclasses.asdict(d) for d in plan.fusion_decisions],
              "fusions": [dataclasses.asdict(f) for f in plan.fusions], "kernel": backend.kernel_record(plan.kernel)}
    kernel_cache.write_cached(key, json.dumps(record).encode(), cache_dir=flags.cache_dir, suffix=SUFFIX)
