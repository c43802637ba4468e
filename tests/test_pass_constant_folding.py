"""ConstantFolding: constant subgraphs become literals with the evaluator's semantics."""

import numpy as np

import hlo
from hlo.passes.constant_folding import ConstantFolding
from hlo.passes.dce import DeadCodeElimination

TEXT = """
HloModule cf
%add (a: s32[], b: s32[]) -> s32[] {
  %a = s32[] parameter(0)
  %b = s32[] parameter(1)
  ROOT %s = s32[] add(%a, %b)
}
ENTRY %main (x: s32[3]) -> s32[3] {
  %x = s32[3]{0} parameter(0)
  %c = s32[3]{0} constant({2147483647, -7, 9})
  %one = s32[] constant(1)
  %b1 = s32[3]{0} broadcast(%one), dimensions={}
  %inc = s32[3]{0} add(%c, %b1)
  %two = s32[] constant(2)
  %b2 = s32[3]{0} broadcast(%two), dimensions={}
  %q = s32[3]{0} divide(%inc, %b2)
  %zero = s32[] constant(0)
  %sum = s32[] reduce(%q, %zero), dimensions={0}, to_apply=%add
  %bs = s32[3]{0} broadcast(%sum), dimensions={}
  ROOT %r = s32[3]{0} add(%x, %bs)
}
"""


def test_folds_through_wrapping_arithmetic_and_reductions() -> None:
    m = hlo.parse_module(TEXT)
    folded = ConstantFolding().run(m)
    hlo.verify(folded)
    main = folded.entry
    # The int32 overflow wraps (2147483647 + 1 = -2147483648) and division truncates toward zero.
    q = np.array([-2147483648 // 2, -3, 5], np.int32)
    assert main["q"].opcode is hlo.Opcode.CONSTANT
    np.testing.assert_array_equal(main["q"].literal.to_numpy(), q)
    assert main["sum"].opcode is hlo.Opcode.CONSTANT
    assert main["sum"].literal.to_numpy() == q.sum(dtype=np.int32)
    assert main["bs"].opcode is hlo.Opcode.BROADCAST  # broadcasts stay cheap, not folded
    out = DeadCodeElimination().run(folded)
    assert [i.name for i in out.entry.instructions] == ["x", "sum", "bs", "r"]
    x = np.array([1, 2, 3], np.int32)
    np.testing.assert_array_equal(hlo.evaluate(out, x)[0], hlo.evaluate(m, x)[0])


def test_no_constants_means_no_change() -> None:
    m = hlo.parse_module("HloModule n\nENTRY %e (x: f32[2]) -> f32[2] {\n  %x = f32[2]{0} parameter(0)\n"
                         "  ROOT %n = f32[2]{0} negate(%x)\n}")
    assert ConstantFolding().run(m) is m
