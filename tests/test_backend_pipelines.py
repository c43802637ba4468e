"""Each backend owns its HLO pipeline (backends/<name>/pipeline.py): the shared passes of
hlo/passes/standard.py, then its own annotation passes; the API compiles with the pipeline of the
backend it compiles for."""

from __future__ import annotations

import inspect

import backends
import hlo
from backends.cpu import pipeline as cpu
from backends.cuda import pipeline as cuda
from hlo.passes.standard import standard_passes
from tests.gpu.cases import MODULES

STANDARD = [p.name for p in standard_passes()]


def test_both_pipelines_have_the_same_interface() -> None:
    for name in ("passes", "optimize", "optimize_with_passes", "prepare", "backend_passes", "OptimizeOptions"):
        a, b = getattr(cpu, name), getattr(cuda, name)
        assert inspect.signature(a) == inspect.signature(b), name
    assert cpu.OptimizeOptions is cuda.OptimizeOptions


def test_each_pipeline_is_the_standard_passes_then_its_own() -> None:
    assert [p.name for p in cpu.passes()] == STANDARD + ["column-reductions", "dnnl-epilogues"]
    assert [p.name for p in cuda.passes()] == STANDARD + ["row-programs"]
    assert [p.name for p in cuda.passes(fusion=False)] == [n for n in STANDARD if n != "fusion"] + ["row-programs"]


def test_a_backend_annotates_only_its_own_kernel_shapes() -> None:
    softmax = hlo.parse_module(MODULES["softmax"])
    assert "row_program=" in cuda.optimize(softmax).to_text()
    assert "row_program=" not in cpu.optimize(softmax).to_text()
    log: list = []
    off = cuda.optimize(softmax, cuda.OptimizeOptions(disabled=frozenset({"row-programs"}), log=log))
    assert "row_program=" not in off.to_text() and ("row-programs", True) not in log
    assert cuda.prepare(cpu.optimize(softmax)) == cuda.optimize(softmax)


def test_the_api_compiles_with_the_pipeline_of_its_backend() -> None:
    """cluster_compiler and tests/codegen_snapshot.py run ``backends.get(name).pipeline()``."""
    assert backends.get("cpu").pipeline().module is cpu and backends.get("cuda").pipeline().module is cuda
    softmax = hlo.parse_module(MODULES["softmax"])
    assert backends.get("cuda").pipeline().run(softmax)[0] == cuda.optimize(softmax)
