"""The CPU pipeline's ColumnReductions pass (backends/cpu/column_reductions.py): which reduces it
annotates ``column_reduce=true``, the text round-trip, and that the C loops follow the annotation
(the numbers of the streaming loop are checked in tests/test_cpu_column_reduce.py)."""

from __future__ import annotations

import pytest

import hlo
from backends.cpu import pipeline
from backends.cpu.codegen import generate
from backends.cpu.column_reductions import ColumnReductions
from hlo.annotations import COLUMN_REDUCE

_ADD = """%add (a: {t}[], b: {t}[]) -> {t}[] {{
  %a = {t}[] parameter(0)
  %b = {t}[] parameter(1)
  ROOT %s = {t}[] {op}(%a, %b)
}}
"""


def module(dims: str, reduced: str, out: str, t: str = "f32", op: str = "add", layout: str = "") -> str:
    return "HloModule col\n" + _ADD.format(t=t, op=op) + f"""
ENTRY %main (x: {t}[{dims}]) -> {t}[{out}] {{
  %x = {t}[{dims}]{layout} parameter(0)
  %e = {t}[{dims}]{layout} multiply(%x, %x)
  %z = {t}[] constant(0)
  ROOT %r = {t}[{out}] reduce(%e, %z), dimensions={{{reduced}}}, to_apply=%add
}}
"""


def annotated(m: hlo.HloModule) -> list[str]:
    return [f"{c.name}/{i.name}" for c, i in m.instructions() if i.attr(COLUMN_REDUCE)]


def test_a_reduce_of_the_leading_dims_is_annotated_at_its_fusion_root() -> None:
    m = pipeline.optimize(hlo.parse_module(module("64,3,5", "0", "3,5")))
    (fusion,) = [i for i in m.entry.instructions if i.opcode.text == "fusion"]
    assert annotated(m) == [f"{fusion.attr('calls').name}/r"]
    text = m.to_text()
    assert "dimensions={0}, to_apply=%add, column_reduce=true" in text
    assert hlo.parse_module(text) == m
    assert ColumnReductions().run(m) is m


@pytest.mark.parametrize("dims, reduced, out, t, op, layout", [
    ("8,16", "1", "8", "f32", "add", ""),  # a row reduction
    ("8,16", "0,1", "", "f32", "add", ""),  # every dim
    ("8,16", "0", "16", "f32", "add", "{0,1}"),  # a column-major input
    ("8,16", "0", "16", "f16", "add", ""),  # compute type (float) is not the storage type
    ("8,16", "0", "16", "f32", "subtract", ""),  # a reducer the backend does not vectorize
    ("0,16", "0", "16", "f32", "add", ""),  # an empty input
])
def test_other_reduces_keep_the_generic_loop(dims, reduced, out, t, op, layout) -> None:
    m = pipeline.optimize(hlo.parse_module(module(dims, reduced, out, t, op, layout)),
                          pipeline.OptimizeOptions(fusion=False))
    assert annotated(m) == []
    assert "column reduction" not in generate(m).source


def test_an_unfused_reduce_is_annotated_itself() -> None:
    m = pipeline.optimize(hlo.parse_module(module("257,33", "0", "33")), pipeline.OptimizeOptions(fusion=False))
    assert annotated(m) == ["main/r"]


def test_the_loops_follow_the_annotation() -> None:
    m = pipeline.optimize(hlo.parse_module(module("257,33", "0", "33")))
    bare = hlo.parse_module(m.to_text().replace(", column_reduce=true", ""))
    assert "column reduction: the input is streamed once" in generate(m).source
    assert "column reduction" not in generate(bare).source
