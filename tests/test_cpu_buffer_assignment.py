"""Buffer assignment: dead buffers are reused, elementwise ops write in place, results stay correct."""

from __future__ import annotations

import numpy as np

import backends.cpu as cpu
import hlo
from backends.codegen.buffer_assignment import Arena, last_uses
from backends.cpu.codegen import generate

# A chain of five [64,64] temporaries where at most two are live at a time (the transposes read
# other indices, so they cannot write in place).
CHAIN = """
HloModule chain
ENTRY %main (x: f32[64,64]) -> f32[64,64] {
  %x = f32[64,64]{1,0} parameter(0)
  %a = f32[64,64]{1,0} transpose(%x), dimensions={1,0}
  %b = f32[64,64]{1,0} transpose(%a), dimensions={1,0}
  %c = f32[64,64]{1,0} transpose(%b), dimensions={1,0}
  %d = f32[64,64]{1,0} transpose(%c), dimensions={1,0}
  %e = f32[64,64]{1,0} exponential(%d)
  ROOT %f = f32[64,64]{1,0} negate(%e)
}
"""


def test_arena_is_the_peak_of_live_buffers_not_their_sum() -> None:
    m = hlo.parse_module(CHAIN)
    g = generate(m)
    one = 64 * 64 * 4
    assert g.scratch_bytes == 2 * one, g.buffer_assignment  # a..e: never more than two alive at once
    assert "in place of d" in g.buffer_assignment  # exponential overwrites its dying operand
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    (got,) = cpu.compile(m)(x)
    np.testing.assert_allclose(got, hlo.evaluate(m, x)[0], rtol=1e-6)


def test_values_used_later_are_not_overwritten() -> None:
    m = hlo.parse_module("""
HloModule keep
ENTRY %main (x: f32[32]) -> (f32[32], f32[32]) {
  %x = f32[32]{0} parameter(0)
  %a = f32[32]{0} exponential(%x)
  %b = f32[32]{0} negate(%a)
  %c = f32[32]{0} add(%b, %a)
  %d = f32[32]{0} multiply(%c, %c)
  ROOT %t = (f32[32]{0}, f32[32]{0}) tuple(%d, %b)
}""")
    last = last_uses(m.entry)
    assert last["a"] == 3 and last["b"] == len(m.entry.instructions)  # b is a result: it lives to the end
    x = np.linspace(-2, 2, 32, dtype=np.float32)
    for got, want in zip(cpu.compile(m)(x), hlo.evaluate(m, x)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_arena_first_fit_coalesces_free_blocks() -> None:
    a = Arena()
    assert a.allocate("a", 100, 0) == 0 and a.allocate("b", 64, 0) == 128 and a.allocate("c", 64, 0) == 192
    a.release("a", 1)
    a.release("b", 1)
    assert a.allocate("d", 190, 2) == 0  # the freed 128 + 64 bytes merged into one block
    assert a.size == 256
    assert "value: <d> (size=192,offset=0): live [2, end]" in a.report("t")


def test_row_major_reshape_is_a_view_not_a_copy() -> None:
    m = hlo.parse_module("""
HloModule view
ENTRY %main (x: f32[4,6]) -> f32[3,8] {
  %x = f32[4,6]{1,0} parameter(0)
  %e = f32[4,6]{1,0} exponential(%x)
  %r = f32[24]{0} reshape(%e)
  %n = f32[24]{0} negate(%r)
  %back = f32[3,8]{1,0} reshape(%n)
  ROOT %t = f32[3,8]{1,0} add(%back, %back)
}""")
    src = generate(m).source
    assert "%r = " not in src and "%back = " not in src  # no loop nest emitted for the views
    assert "%n = f32[24]{0} negate" in src
    x = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    (got,) = cpu.compile(m)(x)
    np.testing.assert_allclose(got, hlo.evaluate(m, x)[0], rtol=1e-6)


# A loop fusion whose elementwise divide feeds a transpose: it reads %e at (i, j) while writing (j, i), so
# it must not overwrite %e even though %e dies there (found by tests/fuzz: softmax, then a gather).
MOVED_AFTER_ELEMENTWISE = """
HloModule moved
%fused (p0: f32[6,6], p1: f32[6]) -> f32[6,6] {
  %p0 = f32[6,6]{1,0} parameter(0)
  %p1 = f32[6]{0} parameter(1)
  %b = f32[6,6]{1,0} broadcast(%p1), dimensions={0}
  %d = f32[6,6]{1,0} divide(%p0, %b)
  ROOT %t = f32[6,6]{1,0} transpose(%d), dimensions={1,0}
}
ENTRY %main (x: f32[6,6], y: f32[6]) -> f32[6,6] {
  %x = f32[6,6]{1,0} parameter(0)
  %y = f32[6]{0} parameter(1)
  %e = f32[6,6]{1,0} exponential(%x)
  %f = f32[6,6]{1,0} fusion(%e, %y), kind=kLoop, calls=%fused
  ROOT %n = f32[6,6]{1,0} negate(%f)
}
"""


def test_a_fusion_that_moves_elements_after_an_elementwise_op_does_not_write_in_place() -> None:
    m = hlo.parse_module(MOVED_AFTER_ELEMENTWISE)
    g = generate(m)
    assert "in place of e" not in g.buffer_assignment, g.buffer_assignment
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((6, 6)).astype(np.float32), rng.uniform(1, 2, 6).astype(np.float32)
    (got,) = cpu.compile(m)(x, y)
    want = -(np.exp(x) / y[:, None]).T
    np.testing.assert_allclose(got, want, rtol=1e-5)  # the definition; the evaluator agrees
    np.testing.assert_allclose(hlo.evaluate(m, x, y)[0], want, rtol=1e-5)
