"""FusionPass: which instructions end up in which fusion, why the others did not, and the same numbers.

Every module is checked three ways: the structure after fusion (fusion kinds
and members, read from the pass's records and the printed HLO), the decision
log text for each refusal reason, and numbers: ``hlo.evaluate`` before and
after fusion agree exactly on random inputs, and the CPU backend compiles the
fused module to the same results (see ``tests/fusion_helpers.py``).
Multi-output fusion has its own file, ``test_pass_fusion_multi_output.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from hlo.opcodes import Opcode
from hlo.passes.fusion import NOT_FUSIBLE, FusionOptions, FusionPass
from hlo.passes.fusion.policy import FUSIBLE_DATA
from tests.fusion_helpers import ADD, LESS, SIBLINGS, entry_ops, fuse, members, random_args

LOOP = """
HloModule loop
ENTRY %main (x: f32[4,8], b: f32[8]) -> f16[8,4] {
  %x = f32[4,8]{1,0} parameter(0)
  %b = f32[8]{0} parameter(1)
  %bb = f32[4,8]{1,0} broadcast(f32[8]{0} %b), dimensions={1}
  %add = f32[4,8]{1,0} add(f32[4,8]{1,0} %x, f32[4,8]{1,0} %bb)
  %c = f32[] constant(0)
  %zero = f32[4,8]{1,0} broadcast(f32[] %c), dimensions={}
  %relu = f32[4,8]{1,0} maximum(f32[4,8]{1,0} %add, f32[4,8]{1,0} %zero)
  %t = f32[8,4]{1,0} transpose(f32[4,8]{1,0} %relu), dimensions={1,0}
  %r = f32[32]{0} reshape(f32[8,4]{1,0} %t)
  %n = f32[32]{0} negate(f32[32]{0} %r)
  %back = f32[8,4]{1,0} reshape(f32[32]{0} %n)
  ROOT %cv = f16[8,4]{1,0} convert(f32[8,4]{1,0} %back)
}
"""


def test_loop_fusion_collapses_an_elementwise_chain_with_data_movement() -> None:
    out, fusion = fuse(LOOP)
    assert entry_ops(out) == ["fusion.0=fusion"]
    assert members(fusion) == {"fusion.0": ("kLoop", ("bb", "add", "c", "zero", "relu", "t", "r", "n", "back", "cv"))}
    text = out.to_text(print_metadata=False)
    assert "ROOT %fusion.0 = f16[8,4]{1,0} fusion(f32[8]{0} %b, f32[4,8]{1,0} %x), kind=kLoop, " \
           "calls=%fused_convert.0" in text
    fused = out.computation("fused_convert.0")
    assert [p.name for p in fused.parameters] == ["param_0", "param_1"]
    assert fused["c"].opcode is Opcode.CONSTANT  # a scalar constant is copied in, never a parameter
    assert "refused producer-consumer %x -> %cv: producer %x is a parameter" in fusion.decision_text()


DATA_MOVEMENT = """
HloModule data_movement
ENTRY %main (x: f32[6], y: f32[4], i: s32[]) -> f32[10] {
  %x = f32[6]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %i = s32[] parameter(2)
  %s = f32[4]{0} slice(f32[6]{0} %x), slice={[1:5]}
  %r = f32[4]{0} reverse(f32[4]{0} %y), dimensions={0}
  %ds = f32[2]{0} dynamic-slice(f32[6]{0} %x, s32[] %i), dynamic_slice_sizes={2}
  %zero = f32[] constant(0)
  %p = f32[4]{0} pad(f32[2]{0} %ds, f32[] %zero), padding=1_1
  %io = s32[4]{0} iota(), iota_dimension=0
  %iof = f32[4]{0} convert(s32[4]{0} %io)
  %lo = f32[] constant(-1)
  %hi = f32[] constant(2)
  %cl = f32[4]{0} clamp(f32[] %lo, f32[4]{0} %s, f32[] %hi)
  %cmp = pred[4]{0} compare(f32[4]{0} %cl, f32[4]{0} %iof), direction=GT
  %sel = f32[4]{0} select(pred[4]{0} %cmp, f32[4]{0} %r, f32[4]{0} %p)
  %cat = f32[10]{0} concatenate(f32[4]{0} %sel, f32[6]{0} %x), dimensions={0}
  ROOT %out = f32[10]{0} multiply(f32[10]{0} %cat, f32[10]{0} %cat)
}
"""


def test_slices_pads_concatenates_iota_dynamic_slice_and_select_fuse_into_one_loop() -> None:
    out, fusion = fuse(DATA_MOVEMENT)
    assert entry_ops(out) == ["fusion.0=fusion"]
    kind, fused = members(fusion)["fusion.0"]
    assert kind == "kLoop"
    assert set(fused) == {"s", "r", "ds", "zero", "p", "io", "iof", "lo", "hi", "cl", "cmp", "sel", "cat", "out"}
    assert [o for o in out.entry.root.operands] == ["x", "y", "i"]


# --- input fusion: reductions --------------------------------------------------------------------

INPUT = "HloModule input\n" + ADD + """
ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %sq = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %x, f32[4,8]{1,0} %x)
  %zero = f32[] constant(0)
  %sum = f32[4]{0} reduce(f32[4,8]{1,0} %sq, f32[] %zero), dimensions={1}, to_apply=%add
  %n = f32[] constant(0.125)
  %nb = f32[4]{0} broadcast(f32[] %n), dimensions={}
  %mean = f32[4]{0} multiply(f32[4]{0} %sum, f32[4]{0} %nb)
  %rs = f32[4]{0} rsqrt(f32[4]{0} %mean)
  %col = f32[4,1]{1,0} reshape(f32[4]{0} %rs)
  %flat = f32[4]{0} reshape(f32[4,1]{1,0} %col)
  %rb = f32[4,8]{1,0} broadcast(f32[4]{0} %flat), dimensions={0}
  ROOT %y = f32[4,8]{1,0} multiply(f32[4,8]{1,0} %x, f32[4,8]{1,0} %rb)
}
"""


def test_reduce_is_an_input_fusion_root_with_producers_and_epilogue_but_never_recomputed() -> None:
    out, fusion = fuse(INPUT)
    assert members(fusion) == {
        "fusion.0": ("kInput", ("sq", "zero", "sum", "n", "nb", "mean", "rs")),
        "fusion.1": ("kLoop", ("col", "flat", "rb", "y")),
    }
    assert entry_ops(out) == ["fusion.0=fusion", "fusion.1=fusion"]
    log = fusion.decision_text()
    assert "refused producer-consumer %rs -> %y: would recompute %rs (rsqrt) per element: %y reads it repeatedly" \
        in log
    # consumers absorb their producers from the end: the reduce joins its epilogue (each element read once)
    assert "fused   producer-consumer %mean -> %rs: kLoop" in log
    assert "fused   producer-consumer %sum -> %rs: kInput" in log
    assert "fused   producer-consumer %sq -> %rs: kInput" in log


def test_reduce_is_never_fused_into_a_broadcasting_consumer() -> None:
    _, fusion = fuse("HloModule center\n" + ADD + """
ENTRY %main (x: f32[4,8]) -> f32[4,8] {
  %x = f32[4,8]{1,0} parameter(0)
  %zero = f32[] constant(0)
  %s = f32[4]{0} reduce(f32[4,8]{1,0} %x, f32[] %zero), dimensions={1}, to_apply=%add
  %sb = f32[4,8]{1,0} broadcast(f32[4]{0} %s), dimensions={0}
  ROOT %y = f32[4,8]{1,0} subtract(f32[4,8]{1,0} %x, f32[4,8]{1,0} %sb)
}""")
    assert members(fusion) == {"fusion.0": ("kInput", ("zero", "s")), "fusion.1": ("kLoop", ("sb", "y"))}
    assert "refused producer-consumer %s -> %y: would recompute a reduction per element: %y reads reduce %s " \
           "repeatedly" in fusion.decision_text()


def test_expensive_producer_is_not_recomputed_through_a_broadcast() -> None:
    out, fusion = fuse("""
HloModule bcast
ENTRY %main (v: f32[4], x: f32[4,8]) -> f32[4,8] {
  %v = f32[4]{0} parameter(0)
  %x = f32[4,8]{1,0} parameter(1)
  %e = f32[4]{0} exponential(f32[4]{0} %v)
  %eb = f32[4,8]{1,0} broadcast(f32[4]{0} %e), dimensions={0}
  ROOT %y = f32[4,8]{1,0} add(f32[4,8]{1,0} %x, f32[4,8]{1,0} %eb)
}""")
    assert members(fusion) == {"fusion.0": ("kLoop", ("eb", "y"))}
    assert "refused producer-consumer %e -> %y: would recompute %e (exponential) per element: %y reads it " \
           "repeatedly" in fusion.decision_text()
    assert [i.opcode.text for i in out.entry.instructions] == ["parameter", "parameter", "exponential", "fusion"]


# --- output fusion: dot epilogues ----------------------------------------------------------------

OUTPUT = """
HloModule output
ENTRY %main (a: f32[4,8], w0: f32[16,8], b: f32[16], r: f32[4,16]) -> (f32[4,16], f32[16,4]) {
  %a = f32[4,8]{1,0} parameter(0)
  %w0 = f32[16,8]{1,0} parameter(1)
  %b = f32[16]{0} parameter(2)
  %r = f32[4,16]{1,0} parameter(3)
  %w = f32[8,16]{1,0} transpose(f32[16,8]{1,0} %w0), dimensions={1,0}
  %d = f32[4,16]{1,0} dot(f32[4,8]{1,0} %a, f32[8,16]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[4,16]{1,0} broadcast(f32[16]{0} %b), dimensions={1}
  %z = f32[4,16]{1,0} add(f32[4,16]{1,0} %d, f32[4,16]{1,0} %bb)
  %c = f32[] constant(0)
  %zeros = f32[4,16]{1,0} broadcast(f32[] %c), dimensions={}
  %relu = f32[4,16]{1,0} maximum(f32[4,16]{1,0} %z, f32[4,16]{1,0} %zeros)
  %res = f32[4,16]{1,0} add(f32[4,16]{1,0} %relu, f32[4,16]{1,0} %r)
  %d2 = f32[4,16]{1,0} dot(f32[4,8]{1,0} %a, f32[8,16]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %d2t = f32[16,4]{1,0} transpose(f32[4,16]{1,0} %d2), dimensions={1,0}
  ROOT %t = (f32[4,16]{1,0}, f32[16,4]{1,0}) tuple(f32[4,16]{1,0} %res, f32[16,4]{1,0} %d2t)
}
"""


def test_dot_with_bias_activation_and_residual_is_an_output_fusion() -> None:
    out, fusion = fuse(OUTPUT)
    made = members(fusion)
    assert made == {"fusion.0": ("kOutput", ("d", "bb", "z", "c", "zeros", "relu", "res"))}
    assert made["fusion.0"] == ("kOutput", ("d", "bb", "z", "c", "zeros", "relu", "res"))
    assert out.entry["w"].opcode is Opcode.TRANSPOSE  # the dot reads its operands from memory
    assert out.entry["d2"].opcode is Opcode.DOT  # a transposing consumer does not take the dot
    log = fusion.decision_text()
    assert "refused producer-consumer %w -> %res: the operands of dot %d stay in memory (output fusion reads " \
           "them from buffers)" in log
    assert "refused producer-consumer %d2 -> %d2t: dot %d2 fuses only into elementwise consumers (output " \
           "fusion); %d2t reads it at another index" in log


def test_an_output_fusion_holds_one_dot() -> None:
    _, fusion = fuse("""
HloModule two_dots
ENTRY %main (a: f32[4,8], w: f32[8,4]) -> f32[4,4] {
  %a = f32[4,8]{1,0} parameter(0)
  %w = f32[8,4]{1,0} parameter(1)
  %d1 = f32[4,4]{1,0} dot(f32[4,8]{1,0} %a, f32[8,4]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %d2 = f32[4,4]{1,0} dot(f32[8,4]{1,0} %w, f32[4,8]{1,0} %a), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  ROOT %s = f32[4,4]{1,0} add(f32[4,4]{1,0} %d1, f32[4,4]{1,0} %d2)
}""")
    assert members(fusion) == {"fusion.0": ("kOutput", ("d1", "s"))}
    assert "refused producer-consumer %d2 -> %s: an output fusion holds one dot and its elementwise epilogue; " \
           "%s already contains %d1" in fusion.decision_text()


def test_the_epilogue_of_a_second_dot_stays_with_that_dot() -> None:
    """relu(d1 * s + d2 * t) (ResNet's conv block: two batch-normed convolutions summed): d1's fusion takes the
    sum and the relu, d2's scale is d2's own output fusion (a oneDNN post-op there, a residual in d1's)."""
    _, fusion = fuse("""
HloModule two_epilogues
ENTRY %main (a: f32[4,8], w: f32[8,4], s: f32[4], t: f32[4]) -> f32[4,4] {
  %a = f32[4,8]{1,0} parameter(0)
  %w = f32[8,4]{1,0} parameter(1)
  %s = f32[4]{0} parameter(2)
  %t = f32[4]{0} parameter(3)
  %d1 = f32[4,4]{1,0} dot(f32[4,8]{1,0} %a, f32[8,4]{1,0} %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %sb = f32[4,4]{1,0} broadcast(f32[4]{0} %s), dimensions={1}
  %m1 = f32[4,4]{1,0} multiply(f32[4,4]{1,0} %d1, f32[4,4]{1,0} %sb)
  %d2 = f32[4,4]{1,0} dot(f32[8,4]{1,0} %w, f32[4,8]{1,0} %a), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  %tb = f32[4,4]{1,0} broadcast(f32[4]{0} %t), dimensions={1}
  %m2 = f32[4,4]{1,0} multiply(f32[4,4]{1,0} %d2, f32[4,4]{1,0} %tb)
  %sum = f32[4,4]{1,0} add(f32[4,4]{1,0} %m1, f32[4,4]{1,0} %m2)
  %zero = f32[] constant(0)
  %z = f32[4,4]{1,0} broadcast(f32[] %zero), dimensions={}
  ROOT %r = f32[4,4]{1,0} maximum(f32[4,4]{1,0} %sum, f32[4,4]{1,0} %z)
}""")
    assert sorted(members(fusion).values()) == [("kOutput", ("d1", "sb", "m1", "sum", "zero", "z", "r")),
                                                ("kOutput", ("d2", "tb", "m2"))]
    assert "refused producer-consumer %m2 -> %r: %m2 is in the epilogue of dot %d2, which fuses it itself " \
           "(%r holds %d1)" in fusion.decision_text()


# --- producers with several users ----------------------------------------------------------------

SHARED = LESS + """
ENTRY %main (x: f32[8], y: f32[8]) -> (f32[8], f32[8]) {
  %x = f32[8]{0} parameter(0)
  %y = f32[8]{0} parameter(1)
  %s = f32[8]{0} add(f32[8]{0} %x, f32[8]{0} %y)
  %a = f32[8]{0} multiply(f32[8]{0} %s, f32[8]{0} %x)
  %b = f32[8]{0} subtract(f32[8]{0} %s, f32[8]{0} %y)
  ROOT %t = (f32[8]{0}, f32[8]{0}) tuple(f32[8]{0} %a, f32[8]{0} %b)
}
"""


def test_cheap_producer_is_duplicated_into_each_user() -> None:
    _, fusion = fuse("HloModule shared\n" + SHARED, FusionOptions(multi_output=False))
    assert members(fusion) == {"fusion.0": ("kLoop", ("s", "a")), "fusion.1": ("kLoop", ("s", "b"))}
    assert "fused   producer-consumer %s -> %b: kLoop, duplicated into 2 users" in fusion.decision_text()


def test_duplication_is_bounded_by_a_budget() -> None:
    _, fusion = fuse("HloModule shared\n" + SHARED, FusionOptions(multi_output=False, max_copies=1))
    assert fusion.fusions == []
    assert "refused producer-consumer %s -> %b: producer %s has 2 users; another copy would compute %s in 2 places " \
           "(limit 1)" in fusion.decision_text()


def test_copies_of_a_chain_are_bounded() -> None:
    # Each a_k feeds e_k and a_{k+1}: copying it into both users would drag the whole prefix of the chain
    # into every later fusion; the copy budget stops that.
    body = ["%x = f32[8]{0} parameter(0)", "%a0 = f32[8]{0} add(f32[8]{0} %x, f32[8]{0} %x)"]
    for k in range(6):
        body.append(f"%e{k} = f32[8]{{0}} exponential(f32[8]{{0}} %a{k})")
        body.append(f"%a{k + 1} = f32[8]{{0}} add(f32[8]{{0}} %a{k}, f32[8]{{0}} %x)")
    outs = ", ".join(f"f32[8]{{0}} %e{k}" for k in range(6))
    body.append(f"ROOT %t = ({', '.join(['f32[8]{0}'] * 7)}) tuple({outs}, f32[8]{{0}} %a6)")
    text = "HloModule chain\nENTRY %main (x: f32[8]) -> (" + ", ".join(["f32[8]"] * 7) + ") {\n  " + \
        "\n  ".join(body) + "\n}\n"
    _, fusion = fuse(text, FusionOptions(multi_output=False))
    places = {n: sum(n in f.members for f in fusion.fusions) for n in [f"a{k}" for k in range(7)]}
    assert max(places.values()) <= 3, places
    assert "another copy would compute %a0 in 4 places (limit 3)" in fusion.decision_text()


def test_no_copy_when_another_user_cannot_fuse_the_producer() -> None:
    _, fusion = fuse("HloModule sorted\n" + SHARED.replace(
        "%b = f32[8]{0} subtract(f32[8]{0} %s, f32[8]{0} %y)",
        "%b = f32[8]{0} sort(f32[8]{0} %s), dimensions={0}, to_apply=%less"), compile_=False)
    assert "refused producer-consumer %s -> %a: producer %s has 2 users and %b cannot fuse it (consumer %b is a " \
           "sort (runs as its own kernel, not inside a loop nest)), so a copy would not remove it" \
           in fusion.decision_text()


def test_window_gather_and_opaque_ops_are_not_fused_and_say_why() -> None:
    module = hlo.parse_module("HloModule barriers\n" + ADD + """
ENTRY %main (x: f32[8], i: s32[2,1]) -> (f32[4], f32[2,2]) {
  %x = f32[8]{0} parameter(0)
  %i = s32[2,1]{1,0} parameter(1)
  %n = f32[8]{0} negate(f32[8]{0} %x)
  %zero = f32[] constant(0)
  %rw = f32[4]{0} reduce-window(f32[8]{0} %n, f32[] %zero), window={size=2 stride=2}, to_apply=%add
  %g = f32[2,2]{1,0} gather(f32[8]{0} %n, s32[2,1]{1,0} %i), offset_dims={1}, collapsed_slice_dims={}, """ \
        """start_index_map={0}, index_vector_dim=1, slice_sizes={2}
  ROOT %t = (f32[4]{0}, f32[2,2]{1,0}) tuple(%rw, %g)
}""")
    fusion = FusionPass()
    assert fusion.run(module) is module  # nothing fused: the pass returns its input
    log = fusion.decision_text()
    assert "refused producer-consumer %n -> %rw: consumer %rw is a reduce-window (not fused yet: it stays its own " \
           "loop nest; a window reads each input element many times)" in log
    assert "refused producer-consumer %n -> %g: consumer %g is a gather (not fused yet: it stays its own loop " \
           "nest)" in log


def test_every_opcode_is_classified() -> None:
    for op in Opcode:
        fusible = (op.is_elementwise and not op.has_side_effect) or op in FUSIBLE_DATA
        assert fusible != (op in NOT_FUSIBLE or op.has_side_effect), op
    assert Opcode.CONVOLUTION in FUSIBLE_DATA  # as the hero of an output fusion (oneDNN + post-ops)
    for op in (Opcode.REDUCE_WINDOW, Opcode.GATHER, Opcode.SCATTER, Opcode.SORT,
               Opcode.BITCAST_CONVERT, Opcode.WHILE, Opcode.CONDITIONAL, Opcode.CALL, Opcode.CUSTOM_CALL,
               Opcode.RNG, Opcode.PARAMETER, Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT):
        assert op in NOT_FUSIBLE


def test_control_dependencies_block_fusion() -> None:
    module = hlo.parse_module("""
HloModule ctrl
ENTRY %main (x: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %a = f32[8]{0} negate(f32[8]{0} %x)
  ROOT %b = f32[8]{0} abs(f32[8]{0} %a), control-predecessors={%a}
}""")
    fusion = FusionPass()
    assert fusion.run(module) is module
    assert "refused producer-consumer %a -> %b: consumer %b has control dependencies" in fusion.decision_text()


def test_size_limit() -> None:
    _, fusion = fuse(LOOP, FusionOptions(max_fused_instructions=3), compile_=False)
    assert "the fusion would hold 4 instructions (limit 3)" in fusion.decision_text()


# --- structure of the whole module -----------------------------------------------------------------

WHILE = "HloModule loop_body\n" + ADD + """
%cond (s: (s32[], f32[4])) -> pred[] {
  %s = (s32[], f32[4]{0}) parameter(0)
  %k = s32[] get-tuple-element((s32[], f32[4]{0}) %s), index=0
  %lim = s32[] constant(3)
  ROOT %lt = pred[] compare(s32[] %k, s32[] %lim), direction=LT
}

%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  %s = (s32[], f32[4]{0}) parameter(0)
  %k = s32[] get-tuple-element((s32[], f32[4]{0}) %s), index=0
  %one = s32[] constant(1)
  %k1 = s32[] add(s32[] %k, s32[] %one)
  %v = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %s), index=1
  %half = f32[] constant(0.5)
  %hb = f32[4]{0} broadcast(f32[] %half), dimensions={}
  %m = f32[4]{0} multiply(f32[4]{0} %v, f32[4]{0} %hb)
  %v1 = f32[4]{0} add(f32[4]{0} %m, f32[4]{0} %v)
  ROOT %r = (s32[], f32[4]{0}) tuple(s32[] %k1, f32[4]{0} %v1)
}

ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4]{0} parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(s32[] %zero, f32[4]{0} %x)
  %w = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %init), condition=%cond, body=%body
  %out = f32[4]{0} get-tuple-element((s32[], f32[4]{0}) %w), index=1
  %fz = f32[] constant(0)
  ROOT %sum = f32[] reduce(f32[4]{0} %out, f32[] %fz), dimensions={0}, to_apply=%add
}
"""


def test_while_bodies_are_fused_and_names_follow_module_order() -> None:
    out, fusion = fuse(WHILE, compile_=False)
    names = [c.name for c in out.computations]
    # fused computations come right before the computation using them; reducers are left alone
    assert names == ["add", "fused_compare.0", "cond", "fused_add.1", "fused_add.2", "body", "fused_reduce.3", "main"]
    assert members(fusion) == {"fusion.0": ("kLoop", ("lim", "lt")), "fusion.1": ("kLoop", ("one", "k1")),
                               "fusion.2": ("kLoop", ("half", "hb", "m", "v1")),
                               "fusion.3": ("kInput", ("fz", "sum"))}
    assert out.computation("add") == hlo.parse_module(WHILE).computation("add")


def test_deterministic_idempotent_and_names_avoid_collisions() -> None:
    text = SIBLINGS.replace("%n = f32[4,8]{1,0} negate", "%fusion.0 = f32[4,8]{1,0} negate").replace(
        "%e, %n)", "%e, %fusion.0)")
    first, second = FusionPass().run(hlo.parse_module(text)), FusionPass().run(hlo.parse_module(text))
    assert first.to_text() == second.to_text()
    fused = [i.name for i in first.entry.instructions if i.opcode is Opcode.FUSION]
    assert fused == ["fusion.1", "fusion.2"]  # fusion.0 is taken by an instruction of the input
    assert FusionPass().run(first) is first


def test_existing_fusions_are_left_alone_and_fused_around() -> None:
    out, fusion = fuse("""
HloModule prefused

%fused_computation (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  ROOT %m = f32[8]{0} multiply(f32[8]{0} %p0, f32[8]{0} %p1)
}

ENTRY %main (x: f32[8], y: f32[8]) -> f32[8] {
  %x = f32[8]{0} parameter(0)
  %y = f32[8]{0} parameter(1)
  %n = f32[8]{0} negate(f32[8]{0} %x)
  %f = f32[8]{0} fusion(f32[8]{0} %n, f32[8]{0} %y), kind=kLoop, calls=%fused_computation
  %a = f32[8]{0} abs(f32[8]{0} %f)
  ROOT %s = f32[8]{0} sqrt(f32[8]{0} %a)
}""")
    assert members(fusion) == {"fusion.0": ("kLoop", ("a", "s"))}
    assert out.entry["f"] == hlo.parse_module(out.to_text()).entry["f"]
    assert out.computation("fused_computation").root.opcode is Opcode.MULTIPLY
    log = fusion.decision_text()
    assert "refused producer-consumer %f -> %s: producer %f is already a fusion" in log
    assert "refused producer-consumer %n -> %f: consumer %f is already a fusion" in log


def test_decisions_are_records_and_text_can_show_refusals_only() -> None:
    _, fusion = fuse(INPUT, compile_=False)
    refused = [d for d in fusion.decisions if not d.fused]
    assert refused and all(d.reason for d in refused)
    assert {d.phase for d in fusion.decisions} <= {"producer-consumer", "multi-output", "sibling"}
    text = fusion.decision_text(refused_only=True)
    assert "fused   " not in text and text.count("refused") == len(refused)
    assert text.startswith("computation %main:\n  %fusion.0 (kInput, calls=%fused_rsqrt.0")


@pytest.mark.parametrize("text", [LOOP, DATA_MOVEMENT, INPUT, OUTPUT, SIBLINGS], ids=["loop", "data", "input",
                                                                                      "output", "siblings"])
def test_fused_modules_evaluate_identically_on_other_inputs(text: str) -> None:
    module = hlo.parse_module(text)
    out = FusionPass().run(module)
    for seed in (1, 2):
        args = random_args(module, seed)
        for got, ref in zip(hlo.evaluate(out, *args), hlo.evaluate(module, *args)):
            np.testing.assert_array_equal(got, ref)


def test_convolution_with_bias_and_relu_becomes_one_output_fusion() -> None:
    import numpy as np

    import backends.cpu as cpu

    module = hlo.parse_module("""
HloModule conv_epilogue
ENTRY %main (x: f32[1,8,8,3], k: f32[3,3,3,4], b: f32[4]) -> f32[1,8,8,4] {
  %x = f32[1,8,8,3]{3,2,1,0} parameter(0)
  %k = f32[3,3,3,4]{3,2,1,0} parameter(1)
  %b = f32[4]{0} parameter(2)
  %conv = f32[1,8,8,4]{3,2,1,0} convolution(%x, %k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %bb = f32[1,8,8,4]{3,2,1,0} broadcast(%b), dimensions={3}
  %add = f32[1,8,8,4]{3,2,1,0} add(%conv, %bb)
  %zero = f32[] constant(0)
  %z = f32[1,8,8,4]{3,2,1,0} broadcast(%zero), dimensions={}
  ROOT %relu = f32[1,8,8,4]{3,2,1,0} maximum(%add, %z)
}""")
    fused = FusionPass().run(module)
    fusions = [i for i in fused.entry.instructions if i.opcode is Opcode.FUSION]
    assert len(fusions) == 1 and str(fusions[0].attr("kind").value) == "kOutput"
    assert fused.entry.root.opcode is Opcode.FUSION
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    (got,) = cpu.compile(fused)(*args)
    np.testing.assert_allclose(got, hlo.evaluate(module, *args)[0], rtol=1e-4, atol=1e-4)
