"""The CUDA pipeline's RowPrograms pass (backends/cuda/row_programs.py): which runs of row-wise fusions
it annotates as one row program, the text round-trip, and that the code generator emits exactly what
the annotation says (the compiled numbers are checked by tests/test_cuda_emulated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from backends.cpu.pipeline import optimize as cpu_optimize
from backends.cuda import pipeline
from backends.cuda.pipeline import OptimizeOptions
from backends.cuda.codegen import generate
from backends.cuda.row_programs import RowPrograms
from hlo.annotations import ROW_PROGRAM, RowProgram, RowRole
from tests.gpu.cases import MODULES


def programs(module: hlo.HloModule) -> dict[str, RowProgram]:
    return {i.name: i.attr(ROW_PROGRAM) for i in module.entry.instructions if ROW_PROGRAM in i.attrs}


def softmax(k: int) -> str:
    return MODULES["softmax"].replace("1000", str(k))


def test_softmax_is_one_row_program_of_four_fusions() -> None:
    m = pipeline.optimize(hlo.parse_module(MODULES["softmax"]))
    got = programs(m)
    assert [(p.group, p.role, p.rows, p.cols) for p in got.values()] == [
        (0, RowRole.REDUCE, 37, 1000), (0, RowRole.FULL, 37, 1000),
        (0, RowRole.REDUCE, 37, 1000), (0, RowRole.FULL, 37, 1000)]
    assert list(got) == [i.name for i in m.entry.instructions if i.opcode.text == "fusion"]
    for name, p in got.items():  # a reduce member names the reduce inside its fusion
        fused = m.computation(m.entry[name].attr("calls").name)
        assert (p.reduce is not None) == (p.role is RowRole.REDUCE)
        assert p.reduce is None or fused[p.reduce].opcode.text == "reduce"


def test_layer_norm_is_one_row_program_of_three_fusions() -> None:
    m = pipeline.optimize(hlo.parse_module(MODULES["layer_norm"]))
    assert [(p.group, p.role) for p in programs(m).values()] == [
        (0, RowRole.REDUCE), (0, RowRole.REDUCE), (0, RowRole.FULL)]


@pytest.mark.parametrize("name", ["gelu", "reductions", "transposes", "dots"])
def test_modules_without_a_row_program_are_left_alone(name: str) -> None:
    optimized = cpu_optimize(hlo.parse_module(MODULES[name]))
    assert RowPrograms().run(optimized) is optimized


def test_rows_outside_min_k_max_k_stay_separate_kernels() -> None:
    for k in (100, 20000):  # below MIN_K; above MAX_K
        m = pipeline.optimize(hlo.parse_module(softmax(k)))
        assert programs(m) == {}, k


def test_a_group_whose_kept_rows_overflow_shared_memory_stops_earlier() -> None:
    """At K = 12000 the exponentials (read again by the sum and the divide) would need a 48000-byte shared
    row: the program stops after them, max and exp in one kernel (exp written out), sum and divide apart."""
    m = pipeline.optimize(hlo.parse_module(softmax(12000)))
    assert [p.role for p in programs(m).values()] == [RowRole.REDUCE, RowRole.FULL]


def test_the_pass_is_idempotent_and_the_annotation_round_trips() -> None:
    m = pipeline.optimize(hlo.parse_module(MODULES["layer_norm"]))
    assert RowPrograms().run(m) is m
    text = m.to_text()
    assert text.count("row_program={group=0,") == 3
    again = hlo.parse_module(text)
    assert again == m and RowPrograms().run(again) is again


def test_a_stale_annotation_is_recomputed() -> None:
    m = pipeline.optimize(hlo.parse_module(softmax(100)))  # nothing to group
    fusion = next(i for i in m.entry.instructions if i.opcode.text == "fusion")
    stale = m.with_computation(m.entry.replace(instructions=tuple(
        i.with_attr(ROW_PROGRAM, RowProgram(0, RowRole.REDUCE, 37, 100, "m")) if i is fusion else i
        for i in m.entry.instructions)))
    assert programs(RowPrograms().run(stale)) == {}


def test_the_code_generator_follows_the_annotation() -> None:
    """An unannotated softmax is four kernels and the annotated one a single row-program kernel: the
    emitter regroups nothing itself."""
    plain = hlo.parse_module(MODULES["softmax"])
    unannotated = cpu_optimize(plain, OptimizeOptions(disabled=frozenset({"row-programs"})))
    assert sorted(set(generate(unannotated).strategies.values())) != ["row-program"]
    assert len(generate(unannotated).kernels) == 4
    g = generate(pipeline.optimize(plain))
    assert list(g.strategies.values()) == ["row-program"]


def test_the_annotated_module_evaluates_as_before() -> None:
    m = hlo.parse_module(MODULES["softmax"])
    x = np.random.default_rng(0).standard_normal((37, 1000)).astype(np.float32)
    (got,) = hlo.evaluate(pipeline.optimize(m), x)
    (want,) = hlo.evaluate(m, x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
