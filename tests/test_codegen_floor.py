"""``backends/codegen``, the floor both backends stand on: it imports neither backend, and one elemental
rule written once comes out in each backend's dialect.

The opcode sweeps (tests/test_cpu_backend_opcodes.py, tests/test_cuda_opcodes.py) check the numbers of
every rule in both dialects; here the same f16/bf16 fusion is emitted through the CPU and the CUDA
dialect and the texts are compared where they must differ (f16's type, OpenMP SIMD pragmas, the backend
named in a refusal) and where they must not (everything else). A reduction of an element computed alone
is offered to the caller's splitter (the CPU backend's split over threads) with everything it needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import hlo
from backends.codegen.buffer import IndentedBuffer
from backends.codegen.dialect import Dialect
from backends.codegen.elemental import ElementalEmitter, SplitReduction
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.int_helpers import int_helpers
from backends.codegen.names import Names
from backends.cpu.dialect import C
from backends.cuda.dialect import CUDA
from hlo.dtypes import PrimitiveType as P
from hlo.opcodes import Opcode

FLOOR = Path(__file__).resolve().parent.parent / "backends" / "codegen"

MODULE = """HloModule floor
add_h {
  a = f16[] parameter(0)
  b = f16[] parameter(1)
  ROOT s = f16[] add(a, b)
}

ENTRY main {
  x = f16[4,8] parameter(0)
  e = f16[4,8] exponential(x)
  z = f16[] constant(0)
  r = f16[4] reduce(e, z), dimensions={1}, to_apply=add_h
  c = bf16[4] convert(r)
  ROOT t = (f16[4], bf16[4]) tuple(r, c)
}
"""


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_the_floor_imports_no_backend() -> None:
    files = sorted(FLOOR.glob("*.py"))
    assert len(files) > 5
    for f in files:
        bad = {m for m in _imports(f) if m.startswith(("backends.cpu", "backends.cuda"))}
        assert not bad, f"{f.name} imports {sorted(bad)}: backends/codegen must stand on no backend"


def _emit(dialect: Dialect, splitter=None) -> str:
    module = hlo.parse_module(MODULE)
    comp = module.entry
    buf = IndentedBuffer()
    readers = [lambda idx: dialect.load(P.F16, f"x[{idx[1]}]")]
    em = ElementalEmitter(dialect, module, comp, readers, buf, Names(), lambda inst: "k")
    em.parallel_reduce = splitter
    value = em.emit("c", ("i",))
    buf.line(f"out = {value};")
    return buf.getvalue()


def test_one_rule_in_two_dialects_differs_only_in_the_dialect_spellings() -> None:
    cpu, cuda = _emit(C), _emit(CUDA)
    assert "#pragma omp simd reduction(+:acc" in cpu and "(float)(_Float16)(" in cpu
    assert "#pragma" not in cuda and "_Float16" not in cuda and "(float)(__half)(" in cuda
    assert "tfxla_bf16_to_f32(tfxla_f32_to_bf16(" in cpu and "tfxla_bf16_to_f32(tfxla_f32_to_bf16(" in cuda
    same = [line.replace("_Float16", "__half") for line in cpu.splitlines() if "#pragma" not in line]
    assert same == cuda.splitlines()


def test_a_reduction_is_offered_to_the_callers_splitter_once() -> None:
    """The splitter gets the loops, the body not yet placed, the accumulator and the reducer; declining
    (False) leaves the serial loop, exactly as without a splitter; taking it (True) leaves its text."""
    offered: list[SplitReduction] = []

    def decline(em, red: SplitReduction) -> bool:
        offered.append(red)
        return False

    def take(em, red: SplitReduction) -> bool:
        em.buf.line(f"SPLIT({red.acc});")
        return True

    assert _emit(C, decline) == _emit(C)
    (red,) = offered
    assert (red.ctype, red.op, red.reducer, red.simd) == ("float", Opcode.ADD, "add_h", f"#pragma omp simd reduction(+:{red.acc})")
    assert [n for _, n in red.bounds] == [8] and red.bounds[0][0] in red.body.getvalue()
    assert f"{red.acc} = " in red.body.getvalue() and "for (" not in red.body.getvalue()
    split = _emit(C, take)
    assert f"SPLIT({red.acc});" in split and "for (" not in split and "x[" not in split
    offered.clear()
    _emit(CUDA, decline)  # the CUDA dialect has no vector clause for it: nothing to split
    assert offered == []


def test_types_and_helpers_are_spelled_by_the_dialect() -> None:
    assert (C.storage(P.F16), CUDA.storage(P.F16)) == ("_Float16", "__half")
    assert (C.store(P.F16, "v"), CUDA.store(P.F16, "v")) == ("(_Float16)(v)", "(__half)(v)")
    assert C.storage(P.BF16) == CUDA.storage(P.BF16) == "uint16_t"
    assert C.compute(P.F16) == CUDA.compute(P.F16) == "float" and C.compute(P.PRED) == "int"
    assert C.literal(-(1 << 63), P.S64) == CUDA.literal(-(1 << 63), P.S64) == "INT64_MIN"
    cpu, cuda = int_helpers(C), int_helpers(CUDA)
    assert "static inline int32_t tfxla_div_s32(" in cpu and "__builtin_clzll(" in cpu
    assert "__device__ __forceinline__ int32_t tfxla_div_s32(" in cuda and "__clzll((long long)" in cuda
    assert "static inline" not in cuda and "__builtin" not in cuda


@pytest.mark.parametrize("dialect", [C, CUDA], ids=lambda d: d.backend)
def test_a_refusal_names_the_backend_of_the_dialect(dialect: Dialect) -> None:
    with pytest.raises(CodegenUnsupported, match=f"the {dialect.backend} backend does not support element type f8e5m2"):
        dialect.storage(P.F8E5M2)
    module = hlo.parse_module("HloModule r\nENTRY e {\n  x = f32[4] parameter(0)\n"
                              "  ROOT r = f32[4] rng(x, x), distribution=rng_uniform\n}\n")
    em = ElementalEmitter(dialect, module, module.entry, [lambda idx: "x"], IndentedBuffer(), Names(), str)
    with pytest.raises(CodegenUnsupported, match=f"%r: the {dialect.backend} backend cannot emit rng inside a loop"):
        em.emit("r", ("i",))
