"""In-place dynamic-update-slice: buffer assignment lets a DUS (or a fusion rooted at one) write only its
update region into its operand's buffer when nothing reads the operand afterwards, and a while loop
update a state element in place; everything else keeps its copy. Each case runs against the evaluator
and checks the generated C says what the assignment decided."""

from __future__ import annotations

import re

import numpy as np

import backends.cpu as cpu
import hlo
from backends.codegen.buffer_assignment import can_write_in_place, in_place_update, loop_state_aliases
from backends.cpu.codegen import generate

# A dying temporary updated by a plain DUS and by a fusion whose root is one (the update computed inside).
DYING = """
HloModule dying
%fused_upd (p0: f32[3,8], p1: f32[16,8], p2: s32[]) -> f32[16,8] {
  %p0 = f32[3,8]{1,0} parameter(0)
  %p1 = f32[16,8]{1,0} parameter(1)
  %p2 = s32[] parameter(2)
  %z = s32[] constant(0)
  %e = f32[3,8]{1,0} exponential(%p0)
  ROOT %d = f32[16,8]{1,0} dynamic-update-slice(%p1, %e, %p2, %z)
}
ENTRY %main (x: f32[16,8], u: f32[3,8], i: s32[], j: s32[]) -> f32[16,8] {
  %x = f32[16,8]{1,0} parameter(0)
  %u = f32[3,8]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  %a = f32[16,8]{1,0} negate(%x)
  %b = f32[16,8]{1,0} dynamic-update-slice(%a, %u, %i, %j)
  ROOT %c = f32[16,8]{1,0} fusion(%u, %b, %j), kind=kLoop, calls=%fused_upd
}
"""

# %a is read after the DUS: the DUS must not overwrite it.
READ_LATER = """
HloModule read_later
ENTRY %main (x: f32[16,8], u: f32[3,8], i: s32[]) -> (f32[16,8], f32[16,8]) {
  %x = f32[16,8]{1,0} parameter(0)
  %u = f32[3,8]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %z = s32[] constant(0)
  %a = f32[16,8]{1,0} negate(%x)
  %b = f32[16,8]{1,0} dynamic-update-slice(%a, %u, %i, %z)
  %c = f32[16,8]{1,0} add(%a, %b)
  ROOT %t = (f32[16,8]{1,0}, f32[16,8]{1,0}) tuple(%c, %b)
}
"""

# A TensorArray-style loop: row i of %acc becomes tanh(x[i] + h), a pass-through weight %w, and the carried
# %h; the final list is also read by the entry afterwards.
LOOP = """
HloModule loop
%cond (s: (s32[], f32[12,5], f32[5], f32[5])) -> pred[] {
  %s = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(12)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%fused_row (p0: f32[12,5], p1: s32[], p2: f32[5]) -> f32[12,5] {
  %p0 = f32[12,5]{1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %p2 = f32[5]{0} parameter(2)
  %z = s32[] constant(0)
  %r = f32[1,5]{1,0} reshape(%p2)
  %t = f32[1,5]{1,0} tanh(%r)
  ROOT %d = f32[12,5]{1,0} dynamic-update-slice(%p0, %t, %p1, %z)
}
%body (s: (s32[], f32[12,5], f32[5], f32[5])) -> (s32[], f32[12,5], f32[5], f32[5]) {
  %s = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %acc = f32[12,5]{1,0} get-tuple-element(%s), index=1
  %w = f32[5]{0} get-tuple-element(%s), index=2
  %h = f32[5]{0} get-tuple-element(%s), index=3
  %h2 = f32[5]{0} add(%h, %w)
  %acc2 = f32[12,5]{1,0} fusion(%acc, %i, %h2), kind=kLoop, calls=%fused_row
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %out = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) tuple(%i2, %acc2, %w, %h2)
}
ENTRY %main (acc: f32[12,5], w: f32[5], h: f32[5]) -> (f32[12,5], f32[5]) {
  %acc = f32[12,5]{1,0} parameter(0)
  %w = f32[5]{0} parameter(1)
  %h = f32[5]{0} parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) tuple(%zero, %acc, %w, %h)
  %loop = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) while(%init), condition=%cond, body=%body
  %res = f32[12,5]{1,0} get-tuple-element(%loop), index=1
  %last = f32[5]{0} get-tuple-element(%loop), index=3
  ROOT %t = (f32[12,5]{1,0}, f32[5]{0}) tuple(%res, %last)
}
"""


def _in_place(report: str, value: str, owner: str) -> bool:
    return re.search(rf"<{value}> \(.*in place of {owner}$", report, re.M) is not None


def _run(text: str, args: list[np.ndarray]) -> tuple[hlo.HloModule, list[np.ndarray]]:
    m = hlo.parse_module(text)
    exe = cpu.compile(m)
    given = [a.copy() for a in args]
    got = exe(*given)
    for a, g in zip(args, given):  # the caller's inputs are never written
        np.testing.assert_array_equal(a, g)
    want = hlo.evaluate(m, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    return m, got


def test_dying_operand_is_updated_in_place() -> None:
    rng = np.random.default_rng(0)
    x, u = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    for i, j in [(2, 0), (14, 0), (-5, 3), (100, 100)]:  # the last three clamp the start indices
        _run(DYING, [x, u, np.int32(i), np.int32(j)])
    m = hlo.parse_module(DYING)
    entry = m.entry
    assert in_place_update(m, entry["b"]) == 0 and in_place_update(m, entry["c"]) == 1
    assert can_write_in_place(m, entry, entry["b"], "a") and not can_write_in_place(m, entry, entry["b"], "u")
    g = generate(m)
    assert _in_place(g.buffer_assignment, "b", "a"), g.buffer_assignment
    # Only the 3x8 updates are written: %b's (a parameter's bytes, 3 whole rows) as one memcpy, the
    # fusion's (computed) in a 3x8 loop; no loop over the 16 rows of a result is left.
    updates = g.source[g.source.index("/* %b ="):g.source.index("TFXLA_EXPORT int tfxla_abi_version")]
    assert re.search(r"memcpy\(\w+ \+ \(.*\), \w+, 96\);", updates), updates
    assert "< 16;" not in updates and updates.count("< 3;") == 1, updates
    # The entry parameter %x is not written: negate reads it into a fresh buffer first.
    assert g.scratch_bytes == 16 * 8 * 4


def test_operand_read_after_the_update_keeps_its_copy() -> None:
    rng = np.random.default_rng(1)
    x, u = rng.standard_normal((16, 8)).astype(np.float32), rng.standard_normal((3, 8)).astype(np.float32)
    for i in (0, 7, 15, -1):
        _run(READ_LATER, [x, u, np.int32(i)])
    m = hlo.parse_module(READ_LATER)
    g = generate(m)
    assert not _in_place(g.buffer_assignment, "b", "a") and "memcpy(" in g.source


def test_entry_parameter_operand_is_copied_not_overwritten() -> None:
    text = """
HloModule param
ENTRY %main (x: f32[6,4], u: f32[2,3], i: s32[], j: s32[]) -> f32[6,4] {
  %x = f32[6,4]{1,0} parameter(0)
  %u = f32[2,3]{1,0} parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  ROOT %d = f32[6,4]{1,0} dynamic-update-slice(%x, %u, %i, %j)
}"""
    rng = np.random.default_rng(2)
    x, u = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    for i, j in [(0, 0), (3, 1), (5, 2), (9, -4)]:  # rows 5 and 9 clamp to 4, columns 2 to 1 and -4 to 0
        m, (got,) = _run(text, [x, u, np.int32(i), np.int32(j)])
        row, col = min(max(i, 0), 4), min(max(j, 0), 1)
        np.testing.assert_array_equal(got[row:row + 2, col:col + 3], u)
    source = generate(m).source
    assert re.search(r"memcpy\(\w+, \w+, 96\)", source), source  # the caller's x copied into the result
    assert "< 2;" in source and "< 3;" in source  # 3 of 4 columns: not contiguous, a loop


def test_overlapping_updates_in_sequence() -> None:
    text = """
HloModule overlap
ENTRY %main (x: f32[10], u: f32[4], v: f32[4], i: s32[], j: s32[]) -> f32[10] {
  %x = f32[10]{0} parameter(0)
  %u = f32[4]{0} parameter(1)
  %v = f32[4]{0} parameter(2)
  %i = s32[] parameter(3)
  %j = s32[] parameter(4)
  %a = f32[10]{0} negate(%x)
  %b = f32[10]{0} dynamic-update-slice(%a, %u, %i)
  %c = f32[10]{0} dynamic-update-slice(%b, %v, %j)
  ROOT %d = f32[10]{0} dynamic-update-slice(%c, %u, %j)
}"""
    rng = np.random.default_rng(3)
    x, u, v = (rng.standard_normal(n).astype(np.float32) for n in (10, 4, 4))
    for i, j in [(1, 3), (3, 1), (8, 6), (-3, 20), (6, 6)]:
        _run(text, [x, u, v, np.int32(i), np.int32(j)])
    g = generate(hlo.parse_module(text))
    assert _in_place(g.buffer_assignment, "b", "a") and _in_place(g.buffer_assignment, "c", "b"), g.buffer_assignment


def test_tensor_array_loop_updates_its_state_in_place() -> None:
    m = hlo.parse_module(LOOP)
    assert loop_state_aliases(m, m.computation("body")) == {1, 2}  # the list and the pass-through weight
    rng = np.random.default_rng(4)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((12, 5), (5,), (5,))]
    _run(LOOP, args)
    source = generate(m).source
    body = source[source.index("/* %acc2 ="):source.index("/* %i2 =")]
    # The row update: copied only when the caller passed distinct buffers, then 5 elements written.
    assert "if ((const void*)" in body and "< 12;" not in body, body


def test_loop_state_read_after_its_update_is_not_aliased() -> None:
    # %acc is read again (a dynamic-slice) after the update: element 1 must keep its copy.
    text = LOOP.replace(
        "  %one = s32[] constant(1)\n",
        "  %one = s32[] constant(1)\n  %z0 = s32[] constant(0)\n"
        "  %old = f32[1,5]{1,0} dynamic-slice(%acc, %i, %z0), dynamic_slice_sizes={1,5}\n"
        "  %oldv = f32[5]{0} reshape(%old)\n").replace("tuple(%i2, %acc2, %w, %h2)", "tuple(%i2, %acc2, %w, %oldv)")
    m = hlo.parse_module(text)
    assert loop_state_aliases(m, m.computation("body")) == {2}
    rng = np.random.default_rng(5)
    _run(text, [rng.standard_normal(s).astype(np.float32) for s in ((12, 5), (5,), (5,))])


def test_loop_state_passed_to_two_results_is_not_aliased() -> None:
    # The pass-through weight also becomes element 3: element 2 stays aliased, 3 gets the copy.
    text = LOOP.replace("tuple(%i2, %acc2, %w, %h2)", "tuple(%i2, %acc2, %w, %w)")
    m = hlo.parse_module(text)
    assert loop_state_aliases(m, m.computation("body")) == {1}  # %w appears twice in the root
    rng = np.random.default_rng(6)
    _run(text, [rng.standard_normal(s).astype(np.float32) for s in ((12, 5), (5,), (5,))])


def test_dying_initial_value_becomes_the_loop_state() -> None:
    # The while's initial list is a temporary that dies at the loop: the state takes its buffer, no copy.
    text = LOOP.replace("  %zero = s32[] constant(0)\n",
                        "  %zero = s32[] constant(0)\n  %acc0 = f32[12,5]{1,0} negate(%acc)\n") \
        .replace("tuple(%zero, %acc, %w, %h)", "tuple(%zero, %acc0, %w, %h)")
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((12, 5), (5,), (5,))]
    m, _ = _run(text, args)
    g = generate(m)
    assert _in_place(g.buffer_assignment, "loop#1", "acc0"), g.buffer_assignment
    start = g.source.index("/* %loop =")
    assert ", 240);" not in g.source[start:g.source.index("for (;;)", start)]  # the list is not copied in
    # Read again after the loop, the initial value keeps its own buffer and the loop copies it.
    later = text.replace("ROOT %t = (f32[12,5]{1,0}, f32[5]{0}) tuple(%res, %last)",
                         "%sum = f32[12,5]{1,0} add(%res, %acc0)\n  ROOT %t = (f32[12,5]{1,0}, f32[5]{0}) tuple(%sum, %last)")
    m, _ = _run(later, args)
    assert not _in_place(generate(m).buffer_assignment, "loop#1", "acc0")


def test_second_loop_takes_the_first_loops_dead_elements_only() -> None:
    # loop2 starts from loop1's list (dead after) and its h (read again at the end): it takes the list's
    # buffer and copies h.
    entry = """ENTRY %main (acc: f32[12,5], w: f32[5], h: f32[5]) -> (f32[12,5], f32[5]) {
  %acc = f32[12,5]{1,0} parameter(0)
  %w = f32[5]{0} parameter(1)
  %h = f32[5]{0} parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) tuple(%zero, %acc, %w, %h)
  %loop1 = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) while(%init), condition=%cond, body=%body
  %l1 = f32[12,5]{1,0} get-tuple-element(%loop1), index=1
  %h1 = f32[5]{0} get-tuple-element(%loop1), index=3
  %init2 = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) tuple(%zero, %l1, %w, %h1)
  %loop2 = (s32[], f32[12,5]{1,0}, f32[5]{0}, f32[5]{0}) while(%init2), condition=%cond, body=%body
  %res = f32[12,5]{1,0} get-tuple-element(%loop2), index=1
  %h2 = f32[5]{0} get-tuple-element(%loop2), index=3
  %sum = f32[5]{0} add(%h2, %h1)
  ROOT %t = (f32[12,5]{1,0}, f32[5]{0}) tuple(%res, %sum)
}
"""
    text = LOOP[:LOOP.index("ENTRY")] + entry
    rng = np.random.default_rng(8)
    m, _ = _run(text, [rng.standard_normal(s).astype(np.float32) for s in ((12, 5), (5,), (5,))])
    report = generate(m).buffer_assignment
    assert _in_place(report, "loop2#1", "loop1#1"), report
    assert not _in_place(report, "loop2#3", "loop1#3"), report
