"""Kernel-shape annotations (hlo/annotations.py): printed and parsed back unchanged, checked by the
verifier (errors by type and message), ignored by the evaluator."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import hlo
from hlo.annotations import COLUMN_REDUCE, POST_OPS, ROW_PROGRAM, PostOp, PostOpChain, RowProgram, RowRole
from hlo.errors import HloParseError, HloVerifierError
from hlo.verifier import verify

_ADD = """%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
"""

ROWS = _ADD + """
%fr (p: f32[4,256]) -> f32[4] {
  %p = f32[4,256] parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[4] reduce(%p, %z), dimensions={1}, to_apply=%add
}
%fd (p0: f32[4], p1: f32[4,256]) -> f32[4,256] {
  %p0 = f32[4] parameter(0)
  %p1 = f32[4,256] parameter(1)
  %b = f32[4,256] broadcast(%p0), dimensions={0}
  ROOT %d = f32[4,256] divide(%p1, %b)
}
ENTRY %main (x: f32[4,256]) -> f32[4,256] {
  %x = f32[4,256] parameter(0)
  %f0 = f32[4] fusion(%x), kind=kInput, calls=%fr, ATTR0
  ROOT %f1 = f32[4,256] fusion(%f0, %x), kind=kLoop, calls=%fd, ATTR1
}
"""
GROUP0 = "row_program={group=0,role=reduce,rows=4,cols=256,reduce=%r}"
GROUP1 = "row_program={group=0,role=full,rows=4,cols=256}"

OUTPUT = """HloModule out
%fused (p0: f32[2,3], p1: f32[3,4], p2: f32[4]) -> f32[2,4] {
  %p0 = f32[2,3] parameter(0)
  %p1 = f32[3,4] parameter(1)
  %p2 = f32[4] parameter(2)
  %d = f32[2,4] dot(%p0, %p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %bb = f32[2,4] broadcast(%p2), dimensions={1}
  %a = f32[2,4] add(%d, %bb)
  %t = f32[2,4] tanh(%a)
  %z = f32[] constant(0)
  %zb = f32[2,4] broadcast(%z), dimensions={}
  ROOT %r = f32[2,4] maximum(%t, %zb)
}
ENTRY %main (x: f32[2,3], w: f32[3,4], b: f32[4]) -> f32[2,4] {
  %x = f32[2,3] parameter(0)
  %w = f32[3,4] parameter(1)
  %b = f32[4] parameter(2)
  ROOT %f = f32[2,4] fusion(%x, %w, %b), kind=kOutput, calls=%fused, ATTR
}
"""
CHAIN = "post_ops={cut=%t,ops={add(%p2,dims={_,0}),tanh},fast={add(%p2,dims={_,0}),tanh,clip(0.0,inf),linear(-1.5,1e-07)}}"

COLUMN = "HloModule col\n" + _ADD + """
ENTRY %main (x: f32[8,3]) -> f32[3] {
  %x = f32[8,3] parameter(0)
  %z = f32[] constant(0)
  ROOT %c = f32[3] reduce(%x, %z), dimensions={DIMS}, to_apply=%add, ATTR
}
"""


def rows(attr0: str = GROUP0, attr1: str = GROUP1) -> str:
    return "HloModule rows\n" + ROWS.replace(", ATTR0", attr0 and ", " + attr0).replace(", ATTR1", attr1 and ", " + attr1)


def output(attr: str = CHAIN) -> str:
    return OUTPUT.replace(", ATTR", attr and ", " + attr)


def column(attr: str = "column_reduce=true", dims: str = "0") -> str:
    return COLUMN.replace(", ATTR", attr and ", " + attr).replace("DIMS", dims)


def roundtrip(text: str) -> hlo.HloModule:
    m = hlo.parse_module(text)
    verify(m)
    again = hlo.parse_module(m.to_text())
    assert again == m and again.to_text() == m.to_text()
    return m


def test_row_program_parses_into_a_typed_value_and_round_trips() -> None:
    m = roundtrip(rows())
    assert m.entry["f0"].attr(ROW_PROGRAM) == RowProgram(0, RowRole.REDUCE, 4, 256, "r")
    assert m.entry["f1"].attr(ROW_PROGRAM) == RowProgram(0, RowRole.FULL, 4, 256)
    assert GROUP0 in m.to_text() and GROUP1 in m.to_text()


def test_post_op_chain_parses_into_typed_post_ops_and_round_trips() -> None:
    m = roundtrip(output())
    chain = m.entry["f"].attr(POST_OPS)
    assert chain == PostOpChain("t", (PostOp("add", operand="p2", dims=(None, 0)), PostOp("tanh")),
                                (PostOp("add", operand="p2", dims=(None, 0)), PostOp("tanh"),
                                 PostOp("clip", 0.0, math.inf), PostOp("linear", -1.5, 1e-07)))
    assert chain.operands == ("p2", "p2")
    assert CHAIN in m.to_text()
    printed = hlo.parse_module(output("post_ops={cut=%d,ops={}}")).to_text()
    assert "post_ops={cut=%d,ops={}}" in printed  # no fast chain: none printed


def test_a_negative_zero_post_op_argument_survives_the_text() -> None:
    m = roundtrip(output("post_ops={cut=%a,ops={add(%p2,dims={_,0}),linear(1.0,-0.0)}}"))
    beta = m.entry["f"].attr(POST_OPS).ops[1].beta
    assert beta == 0 and math.copysign(1.0, beta) < 0


def test_column_reduce_round_trips() -> None:
    m = roundtrip(column())
    assert m.entry["c"].attr(COLUMN_REDUCE) is True


@pytest.mark.parametrize("text, message", [
    (rows(GROUP0.replace("rows=4", "rows=5"), ""), "row_program reduce member must be f32[5], not f32[4]"),
    (rows(GROUP0.replace("%r", "%p"), ""), "row_program reduce member: %p is not its reduce"),
    (rows(GROUP0, GROUP1.replace("cols=256", "cols=128")), "row_program full member must be f32[4, 128]"),
    (output("post_ops={cut=%nope,ops={}}"), "post_ops: the cut %nope is not an array of the fused computation"),
    (output("post_ops={cut=%a,ops={add(%q,dims={_,0})}}"), "post_ops: %q is not an instruction of the fused"),
    (output("post_ops={cut=%a,ops={add(%p2,dims={0})}}"), "post_ops: add of %p2 maps 1 dims, the cut has 2"),
    (output("").replace("kind=kOutput", "kind=kLoop").replace("calls=%fused", "calls=%fused, post_ops={cut=%a,ops={}}"),
     "post_ops on an instruction that is not an output fusion"),
    (column(dims="1").replace("f32[3] reduce", "f32[8] reduce").replace("-> f32[3]", "-> f32[8]"),
     "column_reduce: dimensions={1} are not the leading dims of a rank-2 input"),
    (column(dims="0,1").replace("f32[3] reduce", "f32[] reduce").replace("-> f32[3]", "-> f32[]"),
     "column_reduce: dimensions={0,1} are not the leading dims of a rank-2 input"),
    (column("column_reduce=false"), "column_reduce must be true, not False"),
])
def test_the_verifier_rejects_malformed_annotations(text: str, message: str) -> None:
    m = hlo.parse_module(text)
    with pytest.raises(HloVerifierError, match=re.escape(message)):
        verify(m)


def test_row_program_members_must_be_consecutive() -> None:
    split = "HloModule rows\n" + ROWS.replace(", ATTR0", ", " + GROUP0).replace(", ATTR1", "").replace(
        "  ROOT %f1 = f32[4,256] fusion(%f0, %x), kind=kLoop, calls=%fd\n",
        "  %f1 = f32[4,256] fusion(%f0, %x), kind=kLoop, calls=%fd\n"
        "  ROOT %f2 = f32[4] fusion(%f1), kind=kInput, calls=%fr, " + GROUP0 + "\n").replace(
        "ENTRY %main (x: f32[4,256]) -> f32[4,256]", "ENTRY %main (x: f32[4,256]) -> f32[4]")
    with pytest.raises(HloVerifierError, match="row_program group 0 is not consecutive in the schedule"):
        verify(hlo.parse_module(split))


@pytest.mark.parametrize("text, message", [
    (rows(GROUP0.replace("role=reduce", "role=column")), "expected a row role"),
    (rows(GROUP0.replace(",rows=4", "")), "expected row_program with rows"),
    (output("post_ops={ops={}}"), "expected post_ops with a cut"),
    (output("post_ops={cut=%a,ops={linear(1.0,nan)}}"), "expected a number that is not NaN"),
    (output("post_ops={cut=%a,cut=%d}"), "expected one of ops, fast"),
])
def test_malformed_annotation_text_is_a_parse_error(text: str, message: str) -> None:
    with pytest.raises(HloParseError, match=message):
        hlo.parse_module(text)


def test_the_evaluator_ignores_annotations() -> None:
    x = np.random.default_rng(0).standard_normal((4, 256)).astype(np.float32)
    (got,) = hlo.evaluate(hlo.parse_module(rows()), x)
    (want,) = hlo.evaluate(hlo.parse_module(rows("", "")), x)
    np.testing.assert_array_equal(got, want)
