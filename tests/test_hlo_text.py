"""The HLO text format: round trips, every attribute form, literals, and parse errors."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import hlo
from hlo import (
    ComparisonDirection, ConvDimLabels, FusionKind, HloParseError, PadDim, PrimitiveType, SliceDim, WindowDim,
)
from hlo.text.printer import format_instruction

# A hand-written module exercising every attribute codec and shape form the parser knows.
KITCHEN_SINK = r"""
HloModule kitchen_sink, is_scheduled=true, replica_count=1, frontend_attributes={fingerprint="abc"}

// a comment line
%add_f32 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%lt (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %c = pred[] compare(%a, %b), direction=LT, type=TOTALORDER
}

%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %n = s32[] constant(10)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[4]{0} get-tuple-element(%t), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  ROOT %r = (s32[], f32[4]{0}) tuple(%i2, %v)
}

%fused (p0: f32[2,3]) -> f32[3,2] {
  %p0 = f32[2,3]{1,0} parameter(0)
  ROOT %t = f32[3,2]{1,0} transpose(%p0), dimensions={1,0}
}

ENTRY %main (x: f32[2,3], img: f32[1,8,8,3], k: f32[3,3,3,4], idx: s32[5,1]) -> (f32[3,2], f32[1,4,4,4]) {
  %x = f32[2,3]{1,0} parameter(0), parameter_replication={false}, metadata={op_type="Placeholder" op_name="x" source_file="/a/b \"q\".py" source_line=12}
  %img = f32[1,8,8,3]{3,2,1,0} parameter(1)
  %k = f32[3,3,3,4]{3,2,1,0} parameter(2)
  %idx = s32[5,1]{1,0} parameter(3)
  %conv = f32[1,4,4,4]{3,2,1,0} convolution(%img, %k), window={size=3x3 stride=2x2 pad=0_1x0_1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f, feature_group_count=1, metadata={op_type="Conv2D" op_name="conv"}
  %sl = f32[2,2]{1,0} slice(%x), slice={[0:2], [0:3:2]}
  %zero = f32[] constant(0)
  %pad = f32[5,7]{1,0} pad(%x, %zero), padding=1_2x0_1_1
  %g = f32[5,3]{1,0} gather(%x, %idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}, indices_are_sorted=false
  %rw = f32[1,4,4,3]{3,2,1,0} reduce-window(%img, %zero), window={size=1x2x2x1 stride=1x2x2x1}, to_apply=%add_f32
  %srt = f32[2,3]{1,0} sort(%x), dimensions={1}, is_stable=true, to_apply=%lt
  %dot = f32[2,2]{1,0} dot(%x, %x), lhs_contracting_dims={1}, rhs_contracting_dims={1}, operand_precision={default,highest}
  %init = (s32[], f32[4]{0}) tuple(%idx, %zero), control-predecessors={%dot}
  %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"10"}}
  %cc = f32[2,3]{1,0} custom-call(%x), custom_call_target="MyTarget", api_version=API_VERSION_STATUS_RETURNING, backend_config="opaque\n", sharding={replicated}
  %fu = f32[3,2]{1,0} fusion(%x), kind=kLoop, calls=%fused
  %big = f32[40,50]{1,0} constant({...})
  ROOT %out = (f32[3,2]{1,0}, f32[1,4,4,4]{3,2,1,0}) tuple(%fu, %conv)
}
"""


def test_kitchen_sink_round_trip() -> None:
    m = hlo.parse_module(KITCHEN_SINK)
    text = m.to_text()
    m2 = hlo.parse_module(text)
    assert m2 == m
    assert m2.to_text() == text  # printing is a fixed point
    assert hlo.parse_module(m.to_text(print_operand_shapes=False)) == m


def test_kitchen_sink_typed_attributes() -> None:
    m = hlo.parse_module(KITCHEN_SINK)
    main = m.entry
    assert m.entry_name == "main" and [c.name for c in m.computations][-1] == "main"
    conv = main["conv"]
    window = conv.attr("window")
    assert window.dims == (WindowDim(3, 2, 0, 1), WindowDim(3, 2, 0, 1))
    assert conv.attr("dim_labels") == ConvDimLabels.nhwc(2)
    assert main["sl"].attr("slice") == (SliceDim(0, 2, 1), SliceDim(0, 3, 2))
    assert main["pad"].attr("padding") == (PadDim(1, 2, 0), PadDim(0, 1, 1))
    assert main["g"].attr("slice_sizes") == (1, 3) and main["g"].attr("indices_are_sorted") is False
    assert main["fu"].attr("kind") is FusionKind.LOOP
    assert main["fu"].called_computations == ("fused",)
    assert main["w"].called_computations == ("cond", "body")
    assert m.computation("lt").root.attr("direction") is ComparisonDirection.LT
    assert main["cc"].attr("custom_call_target") == "MyTarget"
    assert main["cc"].attr("backend_config") == "opaque\n"
    assert str(main["cc"].attr("sharding")) == "{replicated}"
    md = main["x"].metadata
    assert (md.op_type, md.op_name, md.source_file, md.source_line) == ("Placeholder", "x", '/a/b "q".py', 12)
    assert main["big"].literal.is_elided and main["big"].shape.dims == (40, 50)
    assert main.root_name == "out" and main.parameters[3].name == "idx"


@pytest.mark.parametrize("text, dtype, expected", [
    ("{1, 2, 3}", "s32", np.array([1, 2, 3], np.int32)),
    ("{ { 1, 2 }, { 3, 4 } }", "s32", np.array([[1, 2], [3, 4]], np.int32)),
    ("{inf, -inf, 1e-30, -0}", "f32", np.array([np.inf, -np.inf, 1e-30, -0.0], np.float32)),
    ("{18446744073709551615, 0}", "u64", np.array([2**64 - 1, 0], np.uint64)),
    ("{-9223372036854775808, 7}", "s64", np.array([-2**63, 7], np.int64)),
    ("{true, false}", "pred", np.array([True, False])),
    ("{0.1, 65504}", "f16", np.array([0.1, 65504], np.float16)),
    ("{0.1, 3.389e+38}", "bf16", np.array([0.1, 3.389e38], np.float32).astype(ml_dtypes.bfloat16)),
])
def test_constant_literals(text: str, dtype: str, expected: np.ndarray) -> None:
    dims = ",".join(str(d) for d in expected.shape)
    m = hlo.parse_module(f"HloModule m\nENTRY %e () -> {dtype}[{dims}] {{\n  ROOT %c = {dtype}[{dims}] constant({text})\n}}")
    got = m.entry.root.literal.to_numpy()
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))  # bitwise (keeps -0)
    assert hlo.parse_module(m.to_text()) == m


def test_nan_constants_keep_sign_and_compare_equal() -> None:
    m = hlo.parse_module("HloModule m\nENTRY %e () -> f32[3] {\n  ROOT %c = f32[3]{0} constant({nan, -nan, 1})\n}")
    arr = m.entry.root.literal.to_numpy()
    assert np.isnan(arr[0]) and not np.signbit(arr[0]) and np.isnan(arr[1]) and np.signbit(arr[1])
    assert "constant({nan, -nan, 1})" in m.to_text()
    assert hlo.parse_module(m.to_text()) == m


def test_constant_without_literal_prints_elided() -> None:
    """An unverified module can be printed (e.g. while reporting why it fails to verify)."""
    inst = hlo.HloInstruction("c", hlo.Opcode.CONSTANT, hlo.scalar("f32"))
    assert format_instruction(inst) == "%c = f32[] constant({...})"


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_float_literals_round_trip_bitwise(dtype) -> None:
    rng = np.random.default_rng(7)
    bits = rng.integers(0, 2 ** (8 * np.dtype(dtype).itemsize), size=400, dtype=np.uint64)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dtype).itemsize]
    values = bits.astype(uint).view(dtype)
    values = values[np.isfinite(values.astype(np.float64))]
    lit = hlo.Literal.from_array(values)
    text = f"HloModule m\nENTRY %e () -> {lit.shape} {{\n  ROOT %c = {lit.shape} constant({hlo.literal.format_literal(lit)})\n}}"
    back = hlo.parse_module(text).entry.root.literal
    assert back == lit


def test_shapes_print_like_xla() -> None:
    assert str(hlo.Shape.array("f32", [2, 3])) == "f32[2,3]{1,0}"
    assert str(hlo.Shape.array("pred", [])) == "pred[]"
    assert str(hlo.parse_shape("(f32[], (s32[0]{0}, token[]))")) == "(f32[], (s32[0]{0}, token[]))"
    assert str(hlo.parse_shape("f32[<=4,3]{1,0}")) == "f32[<=4,3]{1,0}"
    assert str(hlo.parse_shape("f32[8,128]{1,0:T(8,128)}")) == "f32[8,128]{1,0:T(8,128)}"
    assert hlo.parse_shape("f32[2,3]").compatible(hlo.parse_shape("f32[2,3]{0,1}"))


def test_builder_module_prints_and_reparses() -> None:
    b = hlo.ComputationBuilder("main")
    x = b.parameter(hlo.Shape.array("f32", [4]))
    c = b.constant(np.float32(2.5))
    bc = b.broadcast(c, dimensions=(), shape=hlo.Shape.array("f32", [4]))
    r = b.multiply(x, bc, shape=hlo.Shape.array("f32", [4]))
    m = hlo.module_of("built", b.build(r))
    text = m.to_text()
    assert "entry_computation_layout={(f32[4]{0})->f32[4]{0}}" in text
    assert "%broadcast.2 = f32[4]{0} broadcast(f32[] %constant.1), dimensions={}" in text
    assert hlo.parse_module(text) == m


# --- errors -----------------------------------------------------------------------

ERRORS = [
    ("", 1, 1, "'HloModule' header"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1)\n", 4, 1, "'}' closing computation"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  %c = f33[] constant(1)\n}", 3, 8, "element type"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  %c = f32[] constnt(1)\n}", 3, 14, "known opcode"),
    ("HloModule m\nENTRY %e () -> f32[2] {\n  %c = f32[2] constant({1, 2, 3})\n}", 3, 24, "2 elements"),
    ("HloModule m\nENTRY %e (p: f32[]) -> f32[] {\n  %p = f32[] parameter(0)\n  ROOT %n = f32[] negate(%p\n}", 5, 1,
     "',' or ')' in operand list"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1), metadata={op_type=\"x}\n}", 3, 50,
     "closing '\"'"),
    ("HloModule m\nENTRY %e () -> s8[] {\n  ROOT %c = s8[] constant(300)\n}", 3, 27, "fit in s8"),
    ("HloModule m\nENTRY %e (p: f32[2]) -> f32[2] {\n  %p = f32[2]{0} parameter(0)\n"
     "  ROOT %r = f32[2]{0} reverse(%p), dimensions={0,}\n}", 4, 50, "an integer"),
    ("HloModule m\nENTRY %e (p: f32[2]) -> pred[2] {\n  %p = f32[2]{0} parameter(0)\n"
     "  ROOT %r = pred[2]{0} compare(%p, %p), direction=GX\n}", 4, 51, "comparison direction"),
    ("HloModule m\nENTRY %e () -> f32[2] {\n  ROOT %c = f32[2]{0,1} constant({1, 2})\n}", 3, 19, "layout"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  %c = f32[] constant(1)\n  %c = f32[] constant(2)\n}", 4, 3,
     "defined twice"),
    ("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %c = f32[] constant(1), metadata={}, metadata={}\n}", 3, 45,
     "duplicate attribute"),
    ("HloModule m\nENTRY %a () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\nENTRY %b () -> f32[] {\n"
     "  ROOT %c = f32[] constant(1)\n}", 5, 1, "only one ENTRY"),
]


def _root(line: str) -> str:
    return "HloModule m\nENTRY %e () -> f32[] {\n  " + line + "\n}"


# Boundaries: XLA reads every integer as an int64 and has no literal of token type.
ERRORS += [
    (_root("ROOT %c = token[] constant(0)"), 3, 13, "a constant of array type (token[] has no literal value"),
    (_root("ROOT %c = (f32[], token[]) constant((1, 0))"), 3, 13, "a constant of array type"),
    (_root("ROOT %c = token[] constant({...})"), 3, 13, "a constant of array type"),
    (_root("ROOT %c = f32[9223372036854775807,0] constant({})"), 3, 13, "byte size fits in int64"),
    (_root("ROOT %p = f32[9223372036854775808] parameter(0)"), 3, 17, "a dimension size that fits in int64"),
    (_root("ROOT %p = f32[-9223372036854775809] parameter(0)"), 3, 17, "a dimension size that fits in int64"),
    (_root("ROOT %p = f32[2\u00b2] parameter(0)"), 3, 18, "',' or ']' in dimensions"),  # '2'.isdigit() is True
    (_root("ROOT %p = token[2] after-all()"), 3, 13, "token[] (a token has no dimensions)"),
    (_root("%p = f32[2] parameter(0)\n  ROOT %r = f32[2] reverse(%p), dimensions={18446744073709551616}"), 4, 45,
     "an integer that fits in int64"),
    (_root("%p = f32[2] parameter(0)\n  %z = f32[] constant(0)\n  ROOT %r = f32[2] pad(%p, %z), "
           "padding=0_9223372036854775808"), 5, 41, "int64 values"),
    (_root("ROOT %c = f16[] constant(70000)"), 3, 28, "values that fit in f16"),  # f16's max is 65504
    (_root("ROOT %c = c64[] constant((1, 1e39))"), 3, 28, "values that fit in c64"),
]


@pytest.mark.parametrize("text, line, col, expected", ERRORS)
def test_parse_errors_name_line_column_and_expectation(text: str, line: int, col: int, expected: str) -> None:
    with pytest.raises(HloParseError) as info:
        hlo.parse_module(text)
    err = info.value
    assert expected in err.message, err
    assert (err.line, err.column) == (line, col), err
    assert str(err).startswith(f"{line}:{col}: ")


def test_parse_module_rejects_non_text() -> None:
    with pytest.raises(TypeError, match="expects str"):
        hlo.parse_module(b"HloModule m")  # type: ignore[arg-type]


def test_element_type_table_is_complete() -> None:
    for t in PrimitiveType:
        assert PrimitiveType.from_text(t.value) is t
        if t is not PrimitiveType.TOKEN:
            assert PrimitiveType.from_numpy(t.numpy) is t
