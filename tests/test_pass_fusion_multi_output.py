"""FusionPass, multi-output phase: siblings reading one input, producers kept as extra outputs.

The CPU code generator emits a tuple root only when all outputs have the same
dims; merging two nodes must never create a cycle. Each test checks the
structure, the decision log and the numbers (evaluator and CPU backend).
"""

from __future__ import annotations

import hlo
from hlo.opcodes import Opcode
from tests.fusion_helpers import ADD, LESS, SIBLINGS, entry_ops, fuse, members

def test_expensive_producer_with_several_users_stays_and_becomes_an_extra_output() -> None:
    out, fusion = fuse("""
HloModule expensive
ENTRY %main (x: f32[16]) -> (f32[16], f32[16]) {
  %x = f32[16]{0} parameter(0)
  %e = f32[16]{0} exponential(f32[16]{0} %x)
  %y = f32[16]{0} multiply(f32[16]{0} %e, f32[16]{0} %x)
  ROOT %t = (f32[16]{0}, f32[16]{0}) tuple(f32[16]{0} %e, f32[16]{0} %y)
}""")
    log = fusion.decision_text()
    assert "refused producer-consumer %e -> %y: producer %e has 2 users and is expensive (exponential)" in log
    assert "fused   multi-output      %e -> %y: kLoop, %e kept as an output of %fusion.0" in log
    assert members(fusion) == {"fusion.0": ("kLoop", ("e", "y"))}
    assert entry_ops(out) == ["fusion.0=fusion", "e=get-tuple-element", "y=get-tuple-element", "t=tuple"]
    assert out.entry["fusion.0"].shape == hlo.parse_shape("(f32[16]{0}, f32[16]{0})")


# --- multi-output fusion of siblings -------------------------------------------------------------

def test_siblings_with_equal_output_dims_share_one_loop() -> None:
    out, fusion = fuse(SIBLINGS)
    assert members(fusion) == {"fusion.0": ("kInput", ("ninf", "hi", "inf", "lo")),
                               "fusion.1": ("kLoop", ("e", "n"))}
    log = fusion.decision_text()
    assert "fused   sibling           %hi + %lo: kInput multi-output fusion %fusion.0 reading %x" in log
    assert "refused sibling           %hi + %e: siblings reading %x: different output dims for " \
           "multi-output fusion (f32[4] vs f32[4,8])" in log
    for inst in out.entry.instructions:  # the code generator's constraint: equal dims in a tuple root
        if inst.opcode is Opcode.FUSION:
            assert len({s.dims for s in inst.shape.leaves()}) == 1


def test_sibling_fusion_never_creates_a_cycle() -> None:
    _, fusion = fuse("HloModule cycle\n" + LESS + """
ENTRY %main (x: f32[8]) -> (f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %a = f32[8]{0} exponential(f32[8]{0} %x)
  %srt = f32[8]{0} sort(f32[8]{0} %a), dimensions={0}, to_apply=%less
  %b = f32[8]{0} add(f32[8]{0} %x, f32[8]{0} %srt)
  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(f32[8]{0} %a, f32[8]{0} %b)
}""", compile_=False)
    assert "refused sibling           %a + %b: siblings reading %x: would create a cycle through %srt" \
           in fusion.decision_text()
    assert fusion.fusions == []


def test_producer_kept_as_output_never_creates_a_cycle() -> None:
    _, fusion = fuse("HloModule pc_cycle\n" + ADD + """
ENTRY %main (x: f32[4,8]) -> (f32[4,8], f32[4,8]) {
  %x = f32[4,8]{1,0} parameter(0)
  %e = f32[4,8]{1,0} exponential(f32[4,8]{1,0} %x)
  %zero = f32[] constant(0)
  %s = f32[4]{0} reduce(f32[4,8]{1,0} %e, f32[] %zero), dimensions={1}, to_apply=%add
  %sb = f32[4,8]{1,0} broadcast(f32[4]{0} %s), dimensions={0}
  %y = f32[4,8]{1,0} divide(f32[4,8]{1,0} %e, f32[4,8]{1,0} %sb)
  ROOT %t = (f32[4,8]{1,0}, f32[4,8]{1,0}) tuple(f32[4,8]{1,0} %e, f32[4,8]{1,0} %y)
}""")
    log = fusion.decision_text()
    assert "refused multi-output      %e -> %s: different output dims for multi-output fusion (f32[4,8] vs f32[4])" \
           in log
    assert "refused multi-output      %e -> %y: would create a cycle through %s" in log


# --- what never fuses ----------------------------------------------------------------------------
