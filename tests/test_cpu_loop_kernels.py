"""The CPU kernels a recurrent loop's body is made of (the LSTM train step's backward loop, in small):
a while whose non-aliased state ping-pongs between two buffers (no copy per iteration; one after the
loop when it ended in the second), a dynamic-slice of a TensorList row as one memcpy from its clamped
start, and a loop fusion rooted at a concatenate written one nest per operand. One module, run against
the evaluator at trip counts 0, 1, 3 and 4 (the state ends in either buffer) and with slice starts past
both ends; the generated C is checked for what each kernel promises."""

from __future__ import annotations

import re

import numpy as np
import pytest

import backends.cpu as cpu
import hlo

STATE = "(s32[], s32[], f32[4,8]{1,0}, f32[6,4,8]{2,1,0}, f32[4,8]{1,0}, s32[])"
LOOP = f"""
HloModule loop_kernels
%fused_row (list: f32[6,4,8], i: s32[]) -> f32[4,8] {{
  %list = f32[6,4,8]{{2,1,0}} parameter(0)
  %i = s32[] parameter(1)
  %z = s32[] constant(0)
  %ds = f32[1,4,8]{{2,1,0}} dynamic-slice(%list, %i, %z, %z), dynamic_slice_sizes={{1,4,8}}
  ROOT %row = f32[4,8]{{1,0}} reshape(%ds)
}}
%fused_acc (acc: f32[4,8], row: f32[4,8], h: f32[4,8]) -> f32[4,8] {{
  %acc = f32[4,8]{{1,0}} parameter(0)
  %row = f32[4,8]{{1,0}} parameter(1)
  %h = f32[4,8]{{1,0}} parameter(2)
  %m = f32[4,8]{{1,0}} multiply(%row, %h)
  ROOT %a = f32[4,8]{{1,0}} add(%acc, %m)
}}
%fused_cat (row: f32[4,8], h: f32[4,8]) -> f32[4,8] {{
  %row = f32[4,8]{{1,0}} parameter(0)
  %h = f32[4,8]{{1,0}} parameter(1)
  %r0 = f32[2,8]{{1,0}} slice(%row), slice={{[0:2], [0:8]}}
  %h0 = f32[2,8]{{1,0}} slice(%h), slice={{[2:4], [0:8]}}
  %g0 = f32[2,8]{{1,0}} add(%r0, %h0)
  %r1 = f32[2,8]{{1,0}} slice(%row), slice={{[2:4], [0:8]}}
  %g1 = f32[2,8]{{1,0}} tanh(%r1)
  ROOT %c = f32[4,8]{{1,0}} concatenate(%g0, %g1), dimensions={{0}}
}}
%cond (s: {STATE}) -> pred[] {{
  %s = {STATE} parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] get-tuple-element(%s), index=1
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}}
%body (s: {STATE}) -> {STATE} {{
  %s = {STATE} parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] get-tuple-element(%s), index=1
  %acc = f32[4,8]{{1,0}} get-tuple-element(%s), index=2
  %list = f32[6,4,8]{{2,1,0}} get-tuple-element(%s), index=3
  %h = f32[4,8]{{1,0}} get-tuple-element(%s), index=4
  %off = s32[] get-tuple-element(%s), index=5
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %at = s32[] add(%i, %off)
  %row = f32[4,8]{{1,0}} fusion(%list, %at), kind=kLoop, calls=%fused_row
  %acc1 = f32[4,8]{{1,0}} fusion(%acc, %row, %h), kind=kLoop, calls=%fused_acc
  %h1 = f32[4,8]{{1,0}} fusion(%row, %h), kind=kLoop, calls=%fused_cat
  ROOT %out = {STATE} tuple(%i1, %n, %acc1, %list, %h1, %off)
}}
ENTRY %main (n: s32[], acc: f32[4,8], list: f32[6,4,8], h: f32[4,8], off: s32[]) -> (f32[4,8], f32[4,8]) {{
  %n = s32[] parameter(0)
  %acc = f32[4,8]{{1,0}} parameter(1)
  %list = f32[6,4,8]{{2,1,0}} parameter(2)
  %h = f32[4,8]{{1,0}} parameter(3)
  %off = s32[] parameter(4)
  %z = s32[] constant(0)
  %t = {STATE} tuple(%z, %n, %acc, %list, %h, %off)
  %w = {STATE} while(%t), condition=%cond, body=%body
  %a = f32[4,8]{{1,0}} get-tuple-element(%w), index=2
  %hh = f32[4,8]{{1,0}} get-tuple-element(%w), index=4
  ROOT %r = (f32[4,8]{{1,0}}, f32[4,8]{{1,0}}) tuple(%a, %hh)
}}
"""


@pytest.fixture(scope="module")
def exe() -> cpu.Executable:
    return cpu.compile(hlo.parse_module(LOOP))


@pytest.mark.parametrize("trips,offset", [(0, 0), (1, 0), (3, 0), (4, 1), (3, -5), (4, 4)])
def test_loop_matches_the_evaluator(exe: cpu.Executable, trips: int, offset: int) -> None:
    """Starts past either end are clamped (offset -5: row 0; 4: rows 4, 5, 5, 5)."""
    rng = np.random.default_rng(trips)
    args = [np.int32(trips), rng.standard_normal((4, 8)).astype(np.float32),
            rng.standard_normal((6, 4, 8)).astype(np.float32), rng.standard_normal((4, 8)).astype(np.float32),
            np.int32(offset)]
    want = hlo.evaluate(exe.module, *args)
    for g, w in zip(exe(*args), want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def _function(source: str, name: str) -> str:
    start = source.index(f"static int {name}(void* const* p")
    return source[start:source.index("\n}\n", start)]


def test_the_state_ping_pongs_without_copies_per_iteration(exe: cpu.Executable) -> None:
    entry = _function(exe.source, "comp_0")
    loop = entry[entry.index("for (;;)"):]
    loop = loop[:loop.index("\n    }\n")]
    assert "memcpy" not in loop and loop.count("swap_") >= 3, loop  # i, acc, h swap; n, list, off are aliased
    assert re.search(r"if \(cur\d+ != \(void\*\)\(b\d+\)\)", entry), "no copy after the loop"


def test_row_read_is_one_memcpy_and_the_concatenate_one_nest_per_operand(exe: cpu.Executable) -> None:
    body = exe.source[exe.source.index("%row = f32[4,8]{1,0} fusion"):]
    row = body[:body.index("/* %acc1")]
    assert re.search(r"memcpy\(b\d+, b\d+ \+ \(.*\), 128\);", row) and "for (" not in row, row
    cat = body[body.index("/* %h1"):]
    cat = cat[:cat.index("\n}\n")]  # to the end of the body's function
    assert cat.count("for (int64_t") == 4 and "+ 2)" in cat and "?" not in cat, cat  # two 2-deep nests
