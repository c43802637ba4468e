"""The CPU pipeline's DnnlEpilogues pass (backends/cpu/dnnl_epilogues.py): which output fusions it
annotates with which oneDNN post-op chain (``post_ops=``), the text round-trip, and that the code
generator builds the primitive the annotation says (the numbers of every epilogue form are checked
in tests/test_cpu_dnnl_epilogue.py)."""

from __future__ import annotations

import math

import pytest

import hlo
from backends.cpu import dnnl, pipeline
from backends.cpu.codegen import generate
from backends.cpu.dnnl_epilogues import DnnlEpilogues
from hlo.annotations import POST_OPS, PostOp, PostOpChain
from tests.test_cpu_dnnl import cache, check_numbers, compile_text  # noqa: F401  (cache: fixture)

BIAS = PostOp("add", operand="param_2", dims=(None, 0))


def mlp(activation: str) -> str:
    """dense + bias + ``activation`` (HLO lines over %a, ending in ROOT %r)."""
    return f"""HloModule mlp
ENTRY %main (x: f32[8,32], w: f32[32,16], b: f32[16]) -> f32[8,16] {{
  %x = f32[8,32] parameter(0)
  %w = f32[32,16] parameter(1)
  %b = f32[16] parameter(2)
  %d = f32[8,16] dot(%x, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %bb = f32[8,16] broadcast(%b), dimensions={{1}}
  %a = f32[8,16] add(%d, %bb)
  %z = f32[] constant(0)
  %zb = f32[8,16] broadcast(%z), dimensions={{}}
  {activation}
}}
"""


RELU_MAX = "ROOT %r = f32[8,16] maximum(%a, %zb)"  # NaN-propagating: not an exact post-op
RELU_CLIP = "%c = pred[8,16] compare(%zb, %a), direction=LT\n  ROOT %r = f32[8,16] select(%c, %a, %zb)"


def fusion(module: hlo.HloModule) -> hlo.HloInstruction:
    (f,) = [i for i in module.entry.instructions if i.opcode.text == "fusion"]
    return f


def test_dense_bias_relu_cuts_before_the_max_and_keeps_the_fast_chain() -> None:
    m = pipeline.optimize(hlo.parse_module(mlp(RELU_MAX)))
    f = fusion(m)
    assert f.attr("kind").value == "kOutput"
    assert f.attr(POST_OPS) == PostOpChain("a", (BIAS,), (BIAS, PostOp("relu")))


def test_a_relu_whose_nan_is_onednns_is_a_full_match_with_no_fast_chain() -> None:
    m = pipeline.optimize(hlo.parse_module(mlp(RELU_CLIP)))
    assert fusion(m).attr(POST_OPS) == PostOpChain("r", (BIAS, PostOp("relu")), None)


TWO_HEROES = """HloModule two
%fused (p0: f32[8,32], p1: f32[32,16]) -> f32[8,16] {
  %p0 = f32[8,32] parameter(0)
  %p1 = f32[32,16] parameter(1)
  %d = f32[8,16] dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %t = f32[8,32] tanh(%p0)
  %e = f32[8,16] dot(%t, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT %r = f32[8,16] add(%d, %e)
}
ENTRY %main (x: f32[8,32], w: f32[32,16]) -> f32[8,16] {
  %x = f32[8,32] parameter(0)
  %w = f32[32,16] parameter(1)
  ROOT %f = f32[8,16] fusion(%x, %w), kind=kOutput, calls=%fused
}
"""


def test_fusions_that_are_not_one_hero_output_fusions_are_left_alone() -> None:
    two = hlo.parse_module(TWO_HEROES)
    assert DnnlEpilogues().run(two) is two
    loop = pipeline.optimize(hlo.parse_module(
        "HloModule loop\nENTRY %main (x: f32[8,16]) -> f32[8,16] {\n  %x = f32[8,16] parameter(0)\n"
        "  %t = f32[8,16] tanh(%x)\n  ROOT %r = f32[8,16] multiply(%t, %x)\n}\n"))
    assert [i.attr("kind").value for i in loop.entry.instructions if i.opcode.text == "fusion"] == ["kLoop"]
    assert "post_ops=" not in loop.to_text()


def test_the_pass_is_idempotent_and_the_annotation_round_trips() -> None:
    m = pipeline.optimize(hlo.parse_module(mlp(RELU_MAX)))
    assert DnnlEpilogues().run(m) is m
    text = m.to_text()
    assert "post_ops={cut=%a,ops={add(%param_2,dims={_,0})},fast={add(%param_2,dims={_,0}),relu}}" in text
    assert hlo.parse_module(text) == m


def test_clip_bounds_survive_the_text() -> None:
    relu6 = RELU_CLIP.replace("ROOT %r", "%r") + (
        "\n  %six = f32[] constant(6)\n  %sb = f32[8,16] broadcast(%six), dimensions={}"
        "\n  ROOT %q = f32[8,16] minimum(%r, %sb)")
    m = pipeline.optimize(hlo.parse_module(mlp(relu6)))
    chain = fusion(m).attr(POST_OPS)
    assert chain.fast == (BIAS, PostOp("clip", 0.0, 6.0)) and chain.cut == "r"
    assert hlo.parse_module(m.to_text()) == m
    assert math.isinf(PostOp("clip", 0.0, math.inf).beta)


@pytest.mark.skipif(dnnl.find_install() is None, reason="oneDNN is not installed")
def test_the_code_generator_builds_the_annotated_primitive(cache) -> None:  # noqa: F811
    """Without the annotation the primitive computes the dot alone and the loop the rest; with it, the bias
    is the primitive's and the relu the guarded fast primitive's."""
    m = pipeline.optimize(hlo.parse_module(mlp(RELU_MAX)))
    bare = m.with_computation(m.entry.replace(instructions=tuple(
        i.replace(attrs=i.attrs.remove(POST_OPS)) for i in m.entry.instructions)))
    plain = generate(bare).source
    annotated = generate(m).source
    assert "dnnl_primitive_execute(" in plain and "dnnl_post_ops_append" not in plain
    assert annotated.count("dnnl_post_ops_append_eltwise(po, dnnl_eltwise_relu") == 1
    exe = compile_text(m.to_text(), cache)
    assert exe.source == annotated
    check_numbers(exe)


def test_exact_nan_false_chooses_the_masking_chain_outright() -> None:
    """``bench/nan_guard_bench.py``'s baseline: the relu as a post-op, no cut, no guarded fast chain."""
    m = pipeline.optimize(hlo.parse_module(mlp(RELU_MAX)))
    masking = DnnlEpilogues(exact_nan=False).run(m)
    assert fusion(masking).attr(POST_OPS) == PostOpChain("r", (BIAS, PostOp("relu")), None)
    assert DnnlEpilogues().run(masking) == m
