"""Each backend owns its HLO pipeline (backends/<name>/pipeline.py): the shared passes of
hlo/passes/standard.py, then its own annotation passes; the API compiles with the pipeline of the
backend it compiles for."""

from __future__ import annotations

import inspect
import shutil

import numpy as np
import pytest

import backends
import hlo
from backends.cpu import dnnl
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
    assert [p.name for p in cpu.passes()] == STANDARD + ["row-programs", "column-reductions", "dnnl-epilogues"]
    assert [p.name for p in cuda.passes()] == STANDARD + ["row-programs"]
    assert [p.name for p in cuda.passes(fusion=False)] == [n for n in STANDARD if n != "fusion"] + ["row-programs"]


def test_a_backend_annotates_only_its_own_kernel_shapes() -> None:
    softmax = hlo.parse_module(MODULES["softmax"])
    assert "row_program=" in cuda.optimize(softmax).to_text()
    assert "column_reduce=" not in cuda.optimize(hlo.parse_module(MODULES["reductions"])).to_text()
    log: list = []
    off = cuda.optimize(softmax, cuda.OptimizeOptions(disabled=frozenset({"row-programs"}), log=log))
    assert "row_program=" not in off.to_text() and ("row-programs", True) not in log
    assert cuda.prepare(cpu.optimize(softmax)) == cuda.optimize(softmax)


def test_the_api_compiles_with_the_pipeline_of_its_backend() -> None:
    """cluster_compiler and tests/codegen_snapshot.py run ``backends.get(name).pipeline()``."""
    assert backends.get("cpu").pipeline().module is cpu and backends.get("cuda").pipeline().module is cuda
    softmax = hlo.parse_module(MODULES["softmax"])
    assert backends.get("cuda").pipeline().run(softmax)[0] == cuda.optimize(softmax)


# An output fusion (dense + bias + relu) and a reduce of the leading dims, fused as XLA dumps them: no
# kernel-shape annotation yet.
DENSE_AND_COLUMN_SUM = """HloModule dense_colsum
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %main (x: f32[8,32], w: f32[32,16], b: f32[16], y: f32[257,33]) -> (f32[8,16], f32[33]) {
  %x = f32[8,32] parameter(0)
  %w = f32[32,16] parameter(1)
  %b = f32[16] parameter(2)
  %y = f32[257,33] parameter(3)
  %d = f32[8,16] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[8,16] broadcast(%b), dimensions={1}
  %ab = f32[8,16] add(%d, %bb)
  %z = f32[] constant(0)
  %zb = f32[8,16] broadcast(%z), dimensions={}
  %c = pred[8,16] compare(%zb, %ab), direction=LT
  %r = f32[8,16] select(%c, %ab, %zb)
  %yy = f32[257,33] multiply(%y, %y)
  %cs = f32[33] reduce(%yy, %z), dimensions={0}, to_apply=%add
  ROOT %t = (f32[8,16], f32[33]) tuple(%r, %cs)
}
"""


def _fused_without_annotations(pipeline, text: str) -> hlo.HloModule:
    """``text`` through the standard passes only: what an XLA dump looks like to a backend."""
    own = frozenset(p.name for p in pipeline.backend_passes())
    return pipeline.optimize(hlo.parse_module(text), pipeline.OptimizeOptions(disabled=own))


def _count_kernel_shape_passes(monkeypatch, pipeline) -> dict[str, int]:
    """pass name -> how many times its ``run`` ran (patched on each of ``pipeline``'s own pass classes)."""
    runs: dict[str, int] = {}
    for p in pipeline.backend_passes():
        real = type(p).run

        def run(self, module, real=real):
            runs[self.name] = runs.get(self.name, 0) + 1
            return real(self, module)

        monkeypatch.setattr(type(p), "run", run)
    return runs


def _compile_cluster(monkeypatch, module: hlo.HloModule, **flags):
    from tfxla_plugin import cluster_compiler
    from tfxla_plugin.flags import Flags

    monkeypatch.setattr(cluster_compiler, "lower_graph", lambda *a, **k: module)
    return cluster_compiler.compile_cluster("c", None, [], [], Flags(**flags))


@pytest.mark.parametrize("optimize", [True, False])
def test_the_api_runs_each_cpu_kernel_shape_pass_once(monkeypatch, tmp_path, optimize) -> None:
    """Pipeline (or ``--optimize=false``: ``Backend.prepare``), then ``compile``: each pass runs once, and
    ``--optimize=false`` still gets the oneDNN epilogue and the column reduction, shown in the dump."""
    module = _fused_without_annotations(cpu, DENSE_AND_COLUMN_SUM)
    runs = _count_kernel_shape_passes(monkeypatch, cpu)
    compiled = _compile_cluster(monkeypatch, module, cache_dir=str(tmp_path / "k"), optimize=optimize,
                                dump_to=str(tmp_path / "dump"))
    assert runs == {"row-programs": 1, "column-reductions": 1, "dnnl-epilogues": 1}
    (after,) = (tmp_path / "dump").glob("module_*.after_optimizations.txt")
    text = after.read_text()
    assert "kind=kOutput, calls=%fused_select.0, post_ops={cut=%r,ops={add(%param_2,dims={_,0}),relu}}" in text
    assert text.count("column_reduce=true") == 1 and hlo.parse_module(text) == compiled.optimized
    source = compiled.kernel.source
    assert "column reduction: the input is streamed once" in source
    if dnnl.find_install() is not None:
        assert "dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu" in source
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    for got, want in zip(compiled.kernel.native(*args), hlo.evaluate(module, *args)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_api_runs_the_cuda_kernel_shape_pass_once(monkeypatch, tmp_path) -> None:
    runs = _count_kernel_shape_passes(monkeypatch, cuda)
    compiled = _compile_cluster(monkeypatch, hlo.parse_module(MODULES["softmax"]), backend="cuda",
                                cache_dir=str(tmp_path))
    assert runs == {"row-programs": 1}
    assert list(compiled.kernel.native.generated.strategies.values()) == ["row-program"]


def test_generate_decides_no_kernel_shape_and_compile_prepares_unless_told(tmp_path) -> None:
    """An unannotated module generates the plain kernels; ``cpu.compile`` runs the kernel-shape passes on a
    module given as it is, and none with ``prepared=True``."""
    import backends.cpu as cpu_backend
    from backends.cpu.codegen import generate

    module = _fused_without_annotations(cpu, DENSE_AND_COLUMN_SUM)
    assert "column reduction" not in generate(module).source
    exe = cpu_backend.compile(module, cpu_backend.CompileOptions(cache_dir=str(tmp_path)))
    assert exe.module == cpu.prepare(module) != module and exe.source == generate(cpu.prepare(module)).source
    as_given = cpu_backend.compile(module, cpu_backend.CompileOptions(cache_dir=str(tmp_path), prepared=True))
    assert as_given.module is module and as_given.source == generate(module).source
