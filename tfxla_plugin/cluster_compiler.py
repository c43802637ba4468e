"""Compiling one extracted cluster: lower to HLO, optimize, generate and compile the kernel.

Writes XLA-style dumps when ``--dump_to`` is set (``module_NNNN.<name>.before_optimizations.txt``,
``...after_optimizations.txt``, ``....c``, and per-pass dumps with ``--dump_passes``) and logs one
INFO line per compiled cluster on the ``tfxla_plugin`` logger.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import backends.cpu as cpu
from backends.cpu.pipeline import OptimizeOptions, optimize
from hlo.ir import HloModule
from hlo.lowering import InputSpec, lower_graph
from tfxla_plugin.flags import Flags

log = logging.getLogger("tfxla_plugin")
_module_counter = itertools.count()


@dataclass
class CompiledCluster:
    name: str
    hlo: HloModule  # as lowered
    optimized: HloModule
    executable: cpu.Executable
    kernel_path: str
    kernel_hash: str
    compile_seconds: float
    cache_hit: bool

    @property
    def c_source(self) -> str:
        return self.executable.source

    @property
    def signature(self) -> dict:
        return self.executable.generated.signature


def sha256_file(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _dump_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text)


def compile_cluster(name: str, graph_def, inputs: list[InputSpec], outputs: list[str], flags: Flags,
                    sources: dict | None = None, library=None) -> CompiledCluster:
    start = time.perf_counter()
    module = lower_graph(graph_def, inputs, outputs, name=name, sources=sources, library=library)
    dump_dir = Path(flags.dump_to) if flags.dump_to else None
    prefix = None
    if dump_dir is not None:
        dump_dir.mkdir(parents=True, exist_ok=True)
        prefix = dump_dir / f"module_{next(_module_counter):04d}.{_dump_name(name)}"
        (prefix.parent / f"{prefix.name}.before_optimizations.txt").write_text(module.to_text())

    def dump_pass(step: int, pass_name: str, m: HloModule) -> None:
        if prefix is not None and flags.dump_passes:
            (prefix.parent / f"{prefix.name}.{step:04d}.{_dump_name(pass_name)}.txt").write_text(m.to_text())

    optimized = optimize(module, OptimizeOptions(dump=dump_pass)) if flags.optimize else module
    exe = cpu.compile(optimized, cpu.CompileOptions(cache_dir=flags.cache_dir))
    if prefix is not None:
        (prefix.parent / f"{prefix.name}.after_optimizations.txt").write_text(optimized.to_text())
        (prefix.parent / f"{prefix.name}.c").write_text(exe.source)
        (prefix.parent / f"{prefix.name}.buffer-assignment.txt").write_text(exe.generated.buffer_assignment)
    path = str(exe.path)
    seconds = time.perf_counter() - start
    n_ops = sum(1 for _ in module.instructions())
    log.info("compiled cluster %s: %d HLO ops, %.3f s, kernel cache %s", name, n_ops, seconds,
             "hit" if exe.cache_hit else "miss")
    return CompiledCluster(name, module, optimized, exe, path, sha256_file(path), seconds, exe.cache_hit)
