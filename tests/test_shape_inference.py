"""Shape rules against XLA's shape-inference semantics, one table per opcode family.

Expected shapes are worked out by hand from XLA's definitions (the formula is
written next to each non-obvious case), never by calling our own code. Wrong
cases check the exception type and a substring of the message.
"""

from __future__ import annotations

import numpy as np
import pytest

import hlo
from hlo import ComputationBuilder, Literal, Opcode, ProgramShape, Shape, TupleShape, module_of, scalar
from hlo.attributes import Attrs
from hlo.shape_inference import SHAPE_RULES, ShapeContext, ShapeError, _load_rules, infer_shape
from hlo.text.attr_codecs import read_value
from hlo.text.scanner import Scanner

O = Opcode

# Computation signatures the call-like cases refer to: name -> "(params) -> result".
SIGS = {
    "add_f32": "(f32[], f32[]) -> f32[]",
    "add_s32": "(s32[], s32[]) -> s32[]",
    "ge_f32": "(f32[], f32[]) -> pred[]",
    "lt_f32": "(f32[], f32[]) -> pred[]",
    "bad_add": "(f32[], f32[]) -> s32[]",
    "argmax": "(f32[], s32[], f32[], s32[]) -> (f32[], s32[])",
    "sort2": "(f32[], f32[], s32[], s32[]) -> pred[]",
    "binary_f32": "(f32[2], f32[2]) -> f32[2]",
    "fused": "(f32[2,3]) -> f32[3,2]",
    "cond": "((s32[], f32[3])) -> pred[]",
    "cond_s32": "((s32[], f32[3])) -> s32[]",
    "body": "((s32[], f32[3])) -> (s32[], f32[3])",
    "body_bad": "((s32[], f32[3])) -> (s32[], f32[4])",
    "br_true": "(f32[2]) -> f32[3]",
    "br_false": "(s32[]) -> f32[3]",
    "br_other": "(f32[]) -> f32[4]",
    "map_gt": "(f32[], f32[]) -> pred[]",
}


def S(text: str) -> hlo.ShapeLike:
    return hlo.parse_shape(text)


def _sig(text: str) -> ProgramShape:
    params, result = text.split(" -> ")
    inner = params[1:-1]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        depth += {"(": 1, ")": -1, "[": 1, "]": -1}.get(ch, 0)
        cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return ProgramShape(tuple(S(p) for p in parts), S(result))


CALLED = {name: _sig(text) for name, text in SIGS.items()}


def infer(op: Opcode, operands: list[str], declared: str | None = None, **attrs: str):
    """Infer the shape of ``op`` on operand shapes (text); attribute values are HLO text."""
    typed = Attrs((k, read_value(k, Scanner(v))) for k, v in attrs.items())
    ctx = ShapeContext(op, [S(o) for o in operands], typed, declared=S(declared) if declared else None,
                       called=CALLED)
    return infer_shape(ctx)


def check(op, operands, expected, declared=None, **attrs):
    got = infer(op, operands, declared, **attrs)
    assert got.compatible(S(expected)), f"{op.text}: inferred {got.short()}, expected {expected}"
    return got


def check_error(op, operands, message, declared=None, **attrs):
    with pytest.raises(ShapeError) as info:
        infer(op, operands, declared, **attrs)
    assert message in str(info.value), str(info.value)


# --- completeness ---------------------------------------------------------------------------


@pytest.mark.parametrize("op", list(Opcode), ids=lambda op: op.text)
def test_every_opcode_has_a_shape_rule(op: Opcode) -> None:
    _load_rules()
    assert op in SHAPE_RULES, f"no shape rule for {op.text}"


# --- elementwise ------------------------------------------------------------------------------

ELEMENTWISE_OK = [
    (O.ADD, ["f32[2,3]", "f32[2,3]"], "f32[2,3]", None, {}),
    (O.SUBTRACT, ["s8[4]", "s8[4]"], "s8[4]", None, {}),
    (O.POWER, ["s32[4]", "s32[4]"], "s32[4]", None, {}),
    (O.ATAN2, ["f64[]", "f64[]"], "f64[]", None, {}),
    (O.COMPARE, ["s32[4]", "s32[4]"], "pred[4]", None, {"direction": "LT"}),
    (O.COMPARE, ["f32[4]", "f32[4]"], "pred[4]", None, {"direction": "GT", "type": "TOTALORDER"}),
    (O.COMPARE, ["u8[4]", "u8[4]"], "pred[4]", None, {"direction": "EQ", "type": "UNSIGNED"}),
    (O.AND, ["pred[3]", "pred[3]"], "pred[3]", None, {}),
    (O.XOR, ["u32[3]", "u32[3]"], "u32[3]", None, {}),
    (O.SHIFT_RIGHT_LOGICAL, ["s64[2]", "s64[2]"], "s64[2]", None, {}),
    (O.COMPLEX, ["f32[2]", "f32[2]"], "c64[2]", None, {}),
    (O.COMPLEX, ["f64[2]", "f64[2]"], "c128[2]", None, {}),
    (O.IS_FINITE, ["bf16[2,2]"], "pred[2,2]", None, {}),
    (O.ABS, ["c64[3]"], "f32[3]", None, {}),
    (O.ABS, ["s32[3]"], "s32[3]", None, {}),
    (O.REAL, ["c128[2]"], "f64[2]", None, {}),
    (O.IMAG, ["f32[2]"], "f32[2]", None, {}),
    (O.NOT, ["pred[2]"], "pred[2]", None, {}),
    (O.NOT, ["s32[2]"], "s32[2]", None, {}),
    (O.POPCNT, ["u8[2]"], "u8[2]", None, {}),
    (O.CLZ, ["s32[2]"], "s32[2]", None, {}),
    (O.SIGN, ["f32[2]"], "f32[2]", None, {}),
    (O.NEGATE, ["u32[2]"], "u32[2]", None, {}),
    (O.EXPONENTIAL, ["c64[2]"], "c64[2]", None, {}),
    (O.CBRT, ["f16[5]"], "f16[5]", None, {}),
    (O.ROUND_NEAREST_EVEN, ["f32[5]"], "f32[5]", None, {}),
    (O.COPY, ["(f32[2], s32[])"], "(f32[2], s32[])", None, {}),
    (O.SELECT, ["pred[2,3]", "f32[2,3]", "f32[2,3]"], "f32[2,3]", None, {}),
    (O.SELECT, ["pred[]", "s32[2,3]", "s32[2,3]"], "s32[2,3]", None, {}),  # scalar predicate
    (O.CLAMP, ["f32[]", "f32[5]", "f32[]"], "f32[5]", None, {}),  # scalar bounds
    (O.CLAMP, ["s32[5]", "s32[5]", "s32[5]"], "s32[5]", None, {}),
    (O.CONVERT, ["f32[2,3]"], "s32[2,3]", "s32[2,3]", {}),
    (O.CONVERT, ["pred[2]"], "bf16[2]", "bf16[2]", {}),
    (O.BITCAST_CONVERT, ["f32[2,5]"], "s32[2,5]", "s32[2,5]", {}),
    (O.BITCAST_CONVERT, ["f32[2]"], "u8[2,4]", "u8[2,4]", {}),  # 32 -> 8 bits appends a dim of 4
    (O.BITCAST_CONVERT, ["u16[3,2]"], "f32[3]", "f32[3]", {}),  # 16 -> 32 bits consumes a dim of 2
    (O.REDUCE_PRECISION, ["f32[4]"], "f32[4]", None, {"exponent_bits": "5", "mantissa_bits": "10"}),
]


@pytest.mark.parametrize("op, operands, expected, declared, attrs", ELEMENTWISE_OK,
                         ids=lambda v: v.text if isinstance(v, Opcode) else None)
def test_elementwise(op, operands, expected, declared, attrs) -> None:
    check(op, operands, expected, declared, **attrs)


ELEMENTWISE_BAD = [
    (O.ADD, ["f32[2,3]", "f32[3,2]"], "same dimensions", None, {}),
    (O.ADD, ["f32[2,3]", "f32[]"], "no implicit broadcasting", None, {}),
    (O.MULTIPLY, ["f32[2]", "s32[2]"], "same element type", None, {}),
    (O.ADD, ["(f32[2])", "f32[2]"], "lhs must be an array", None, {}),
    (O.SUBTRACT, ["pred[2]", "pred[2]"], "arithmetic", None, {}),
    (O.AND, ["f32[2]", "f32[2]"], "pred or integral", None, {}),
    (O.SHIFT_LEFT, ["f32[2]", "f32[2]"], "integral", None, {}),
    (O.COMPLEX, ["s32[2]", "s32[2]"], "f32 or f64", None, {}),
    (O.COMPARE, ["f32[2]", "f32[2]"], "comparison type SIGNED", None, {"direction": "LT", "type": "SIGNED"}),
    (O.COMPARE, ["f32[2]", "f32[2]"], "requires attribute direction", None, {}),
    (O.FLOOR, ["s32[2]"], "floating point", None, {}),
    (O.EXPONENTIAL, ["s32[2]"], "floating point or complex", None, {}),
    (O.IS_FINITE, ["c64[2]"], "floating point", None, {}),
    (O.POPCNT, ["f32[2]"], "integral", None, {}),
    (O.NOT, ["f32[2]"], "pred or integral", None, {}),
    (O.ABS, ["u32[2]"], "signed integer, floating point or complex", None, {}),
    (O.NEGATE, ["pred[2]"], "integral, floating point or complex", None, {}),
    (O.SELECT, ["s32[2]", "f32[2]", "f32[2]"], "element type pred", None, {}),
    (O.SELECT, ["pred[3]", "f32[2,3]", "f32[2,3]"], "must be a scalar or have the dimensions", None, {}),
    (O.SELECT, ["pred[2]", "f32[2]", "s32[2]"], "on_true and on_false must have the same shape", None, {}),
    (O.CLAMP, ["f32[2]", "f32[5]", "f32[]"], "min f32[2] must be a scalar", None, {}),
    (O.CLAMP, ["s32[]", "f32[5]", "f32[]"], "same element type", None, {}),
    (O.CONVERT, ["f32[2,3]"], "cannot change dimensions", "s32[3,2]", {}),
    (O.CONVERT, ["f32[2,3]"], "needs its result shape", None, {}),
    (O.BITCAST_CONVERT, ["u8[3,3]"], "last dimension of u8[3,3] must be 4", "f32[3]", {}),
    (O.BITCAST_CONVERT, ["f32[2]"], "complex and real", "c64[2]", {}),
    (O.REDUCE_PRECISION, ["f32[4]"], "exponent_bits must be at least 1", None,
     {"exponent_bits": "0", "mantissa_bits": "10"}),
    (O.REDUCE_PRECISION, ["s32[4]"], "floating point", None, {"exponent_bits": "5", "mantissa_bits": "10"}),
    (O.NEGATE, ["f32[2]", "f32[2]"], "takes 1 operand(s), got 2", None, {}),
]


@pytest.mark.parametrize("op, operands, message, declared, attrs", ELEMENTWISE_BAD,
                         ids=lambda v: v.text if isinstance(v, Opcode) else None)
def test_elementwise_errors(op, operands, message, declared, attrs) -> None:
    check_error(op, operands, message, declared, **attrs)


# --- leaves and data movement -------------------------------------------------------------------

MOVEMENT_OK = [
    (O.PARAMETER, [], "f32[2]", "f32[2]", {}),
    (O.IOTA, [], "s32[4,5]", "s32[4,5]", {"iota_dimension": "1"}),
    (O.BROADCAST, ["f32[3]"], "f32[2,3]", "f32[2,3]", {"dimensions": "{1}"}),
    (O.BROADCAST, ["f32[]"], "f32[2,3]", "f32[2,3]", {"dimensions": "{}"}),
    (O.BROADCAST, ["f32[2,4]"], "f32[2,3,4]", "f32[2,3,4]", {"dimensions": "{0,2}"}),
    # XLA's HLO verifier accepts unsorted dims (optimized HLO folds transposes into broadcasts).
    (O.BROADCAST, ["f32[2,3]"], "f32[3,2,4]", "f32[3,2,4]", {"dimensions": "{1,0}"}),
    (O.RESHAPE, ["f32[2,3]"], "f32[6]", "f32[6]", {}),
    (O.RESHAPE, ["f32[1,1]"], "f32[]", "f32[]", {}),
    (O.BITCAST, ["f32[2,3]"], "f32[3,2]", "f32[3,2]", {}),
    (O.DYNAMIC_RESHAPE, ["f32[6]", "s32[]", "s32[]"], "f32[2,3]", "f32[2,3]", {}),
    (O.TRANSPOSE, ["f32[2,3,4]"], "f32[4,2,3]", None, {"dimensions": "{2,0,1}"}),  # out[i] = in[perm[i]]
    (O.SLICE, ["f32[10,8]"], "f32[3,8]", None, {"slice": "{[2:9:3], [0:8]}"}),  # ceil((9-2)/3) = 3
    (O.SLICE, ["f32[10]"], "f32[0]", None, {"slice": "{[4:4]}"}),
    (O.DYNAMIC_SLICE, ["f32[4,3]", "s32[]", "s32[]"], "f32[1,3]", None, {"dynamic_slice_sizes": "{1,3}"}),
    (O.DYNAMIC_UPDATE_SLICE, ["f32[4,3]", "f32[1,3]", "s32[]", "s32[]"], "f32[4,3]", None, {}),
    (O.CONCATENATE, ["f32[2,3]", "f32[5,3]", "f32[1,3]"], "f32[8,3]", None, {"dimensions": "{0}"}),
    (O.CONCATENATE, ["s32[2,3]", "s32[2,1]"], "s32[2,4]", None, {"dimensions": "{1}"}),
    # dim0: lo 1 + hi 2 + n 3 + (3-1)*interior 1 = 8; dim1: -1 + 0 + 4 = 3
    (O.PAD, ["f32[3,4]", "f32[]"], "f32[8,3]", None, {"padding": "1_2_1x-1_0"}),
    (O.PAD, ["f32[0]", "f32[]"], "f32[2]", None, {"padding": "1_1_5"}),  # max(0-1, 0) interior terms
    (O.REVERSE, ["f32[2,3]"], "f32[2,3]", None, {"dimensions": "{0,1}"}),
    (O.GET_DIMENSION_SIZE, ["f32[3,4]"], "s32[]", None, {"dimensions": "{1}"}),
    (O.SET_DIMENSION_SIZE, ["f32[3,4]", "s32[]"], "f32[3,<=4]", None, {"dimensions": "{1}"}),
]


@pytest.mark.parametrize("op, operands, expected, declared, attrs", MOVEMENT_OK,
                         ids=lambda v: v.text if isinstance(v, Opcode) else None)
def test_data_movement(op, operands, expected, declared, attrs) -> None:
    check(op, operands, expected, declared, **attrs)


MOVEMENT_BAD = [
    (O.PARAMETER, [], "needs its result shape", None, {}),
    (O.IOTA, [], "iota_dimension 2 is out of range", "s32[4,5]", {"iota_dimension": "2"}),
    (O.IOTA, [], "rank at least 1", "s32[]", {"iota_dimension": "0"}),
    (O.BROADCAST, ["f32[3]"], "operand dimension 0 has size 3 but output dimension 0 has size 2", "f32[2,3]",
     {"dimensions": "{0}"}),
    (O.BROADCAST, ["f32[2,2]"], "repeated dimensions", "f32[2,2]", {"dimensions": "{0,0}"}),
    (O.BROADCAST, ["f32[3]"], "out of range", "f32[3]", {"dimensions": "{1}"}),
    (O.BROADCAST, ["f32[3]"], "one output dimension per operand dimension", "f32[2,3]", {"dimensions": "{0,1}"}),
    (O.BROADCAST, ["f32[3]"], "element type", "s32[2,3]", {"dimensions": "{1}"}),
    (O.RESHAPE, ["f32[2,3]"], "element counts differ", "f32[5]", {}),
    (O.BITCAST, ["f32[2,3]"], "differ in size", "f32[7]", {}),
    (O.DYNAMIC_RESHAPE, ["f32[6]", "s32[]"], "one size operand per result dimension", "f32[2,3]", {}),
    (O.TRANSPOSE, ["f32[2,3,4]"], "not a permutation", None, {"dimensions": "{0,0,1}"}),
    (O.TRANSPOSE, ["f32[2,3]"], "not a permutation", None, {"dimensions": "{0}"}),
    (O.SLICE, ["f32[10]"], "out of bounds for size 10", None, {"slice": "{[0:11]}"}),
    (O.SLICE, ["f32[10]"], "out of bounds", None, {"slice": "{[5:4]}"}),
    (O.SLICE, ["f32[10]"], "stride 0 must be positive", None, {"slice": "{[0:4:0]}"}),
    (O.SLICE, ["f32[10,2]"], "slice has 1 dimension(s)", None, {"slice": "{[0:4]}"}),
    (O.DYNAMIC_SLICE, ["f32[4,3]", "s32[]", "s32[]"], "slice size 5 of dimension 0 is out of range", None,
     {"dynamic_slice_sizes": "{5,3}"}),
    (O.DYNAMIC_SLICE, ["f32[4,3]", "s32[]"], "needs 2 start index operand(s)", None,
     {"dynamic_slice_sizes": "{1,3}"}),
    (O.DYNAMIC_SLICE, ["f32[4,3]", "f32[]", "f32[]"], "integer scalar", None, {"dynamic_slice_sizes": "{1,3}"}),
    (O.DYNAMIC_SLICE, ["f32[4,3]", "s32[]", "s64[]"], "same element type", None,
     {"dynamic_slice_sizes": "{1,3}"}),
    (O.DYNAMIC_UPDATE_SLICE, ["f32[4,3]", "f32[5,3]", "s32[]", "s32[]"], "larger than the operand", None, {}),
    (O.DYNAMIC_UPDATE_SLICE, ["f32[4,3]", "s32[1,3]", "s32[]", "s32[]"], "element type", None, {}),
    (O.CONCATENATE, ["f32[2,3]", "f32[2,4]"], "must match except in dimension 0", None, {"dimensions": "{0}"}),
    (O.CONCATENATE, ["f32[2,3]", "f32[2,3]"], "dimension 2 is out of range", None, {"dimensions": "{2}"}),
    (O.CONCATENATE, ["f32[2,3]", "s32[2,3]"], "same element type", None, {"dimensions": "{0}"}),
    (O.PAD, ["f32[3]", "f32[]"], "gives negative size -2", None, {"padding": "-5_0"}),
    (O.PAD, ["f32[3]", "f32[]"], "interior padding -1 is negative", None, {"padding": "0_0_-1"}),
    (O.PAD, ["f32[3]", "f32[1]"], "must be a scalar", None, {"padding": "0_0"}),
    (O.PAD, ["f32[3]", "s32[]"], "element type", None, {"padding": "0_0"}),
    (O.REVERSE, ["f32[2,3]"], "out of range", None, {"dimensions": "{2}"}),
    (O.SET_DIMENSION_SIZE, ["f32[3,4]", "f32[]"], "integer scalar", None, {"dimensions": "{1}"}),
]


@pytest.mark.parametrize("op, operands, message, declared, attrs", MOVEMENT_BAD,
                         ids=lambda v: v.text if isinstance(v, Opcode) else None)
def test_data_movement_errors(op, operands, message, declared, attrs) -> None:
    check_error(op, operands, message, declared, **attrs)


def test_constant_takes_the_literal_shape() -> None:
    lit = Literal.from_array(np.zeros((2, 3), np.float32))
    ctx = ShapeContext(O.CONSTANT, [], declared=S("f32[2,3]{0,1}"), literal=lit)
    assert infer_shape(ctx).compatible(S("f32[2,3]"))
    with pytest.raises(ShapeError, match="literal has shape f32\\[2,3\\] but f32\\[3,2\\] is declared"):
        infer_shape(ShapeContext(O.CONSTANT, [], declared=S("f32[3,2]"), literal=lit))
    with pytest.raises(ShapeError, match="no literal"):
        infer_shape(ShapeContext(O.CONSTANT, [], declared=S("f32[3,2]")))


# --- gather and scatter -----------------------------------------------------------------------------

GATHER = dict(offset_dims="{0}", collapsed_slice_dims="{1}", start_index_map="{1}", index_vector_dim="1",
              slice_sizes="{5,1}")
GATHER_ND = dict(offset_dims="{1}", collapsed_slice_dims="{0,1}", start_index_map="{0,1}", index_vector_dim="1",
                 slice_sizes="{1,1,3}")
GATHER_BATCHED = dict(offset_dims="{2}", collapsed_slice_dims="{1}", start_index_map="{1}", index_vector_dim="2",
                      operand_batching_dims="{0}", start_indices_batching_dims="{0}", slice_sizes="{1,1,3}")


def test_gather() -> None:
    # Output rank = |offset_dims| + rank(expanded indices) - 1. index_vector_dim == rank(indices) means a
    # trailing index dim of 1: batch dims [4]; offset dim 0 takes the slice size of the non-collapsed dim 0 (5).
    check(O.GATHER, ["f32[5,6]", "s32[4]"], "f32[5,4]", **GATHER)
    # gather_nd: indices [6,2] index two dims; batch [6], window = slice dim 2 (size 3).
    check(O.GATHER, ["f32[4,5,3]", "s32[6,2]"], "f32[6,3]", **GATHER_ND)
    # Batching: operand dim 0 pairs with indices dim 0 (size 2); batch dims [2,4]; window = operand dim 2 (3).
    check(O.GATHER, ["f32[2,5,3]", "s32[2,4,1]"], "f32[2,4,3]", **GATHER_BATCHED)
    # No collapsed dims: every slice dim is an offset dim, placed at offset_dims {0,1,2,3}; batch [6,6].
    check(O.GATHER, ["f32[1,3,3,2]", "s32[6,6,2]"], "f32[1,3,3,2,6,6]", offset_dims="{0,1,2,3}",
          collapsed_slice_dims="{}", start_index_map="{1,2}", index_vector_dim="2", slice_sizes="{1,3,3,2}")


@pytest.mark.parametrize("change, message", [
    (dict(slice_sizes="{5,2}"), "slice size must be 0 or 1, got 2"),
    (dict(slice_sizes="{7,1}"), "slice size 7 of dimension 0 is out of range"),
    (dict(start_index_map="{0,1}"), "one entry per index component"),
    (dict(offset_dims="{1,0}", collapsed_slice_dims="{}", slice_sizes="{5,1}"), "increasing"),
    (dict(index_vector_dim="3"), "index_vector_dim=3 is out of range"),
    (dict(collapsed_slice_dims="{}"), "must cover the operand's rank 2"),
])
def test_gather_errors(change, message) -> None:
    check_error(O.GATHER, ["f32[5,6]", "s32[4]"], message, **{**GATHER, **change})


def test_gather_batching_errors() -> None:
    check_error(O.GATHER, ["f32[3,5,3]", "s32[2,4,1]"], "operand batching dim 0 has size 3 but indices batching "
                "dim 0 has size 2", **GATHER_BATCHED)
    check_error(O.GATHER, ["f32[2,5,3]", "s32[2,4,1]"], "must not contain index_vector_dim 2",
                **{**GATHER_BATCHED, "start_indices_batching_dims": "{2}"})
    check_error(O.GATHER, ["f32[2,5,3]", "f32[2,4,1]"], "integral element type", **GATHER_BATCHED)


SCATTER = dict(update_window_dims="{1}", inserted_window_dims="{0}", scatter_dims_to_operand_dims="{0}",
               index_vector_dim="1", to_apply="%add_f32")


def test_scatter() -> None:
    check(O.SCATTER, ["f32[5,3]", "s32[6,1]", "f32[6,3]"], "f32[5,3]", **SCATTER)
    check(O.SCATTER, ["f32[5,3]", "s32[6]", "f32[6,2]"], "f32[5,3]", **SCATTER)  # window may be smaller
    # scatter_nd with scalar updates: every operand dim inserted.
    check(O.SCATTER, ["f32[4,5]", "s32[3,2]", "f32[3]"], "f32[4,5]", update_window_dims="{}",
          inserted_window_dims="{0,1}", scatter_dims_to_operand_dims="{0,1}", index_vector_dim="1",
          to_apply="%add_f32")
    # Variadic: two inputs and two updates give a tuple.
    check(O.SCATTER, ["f32[5,3]", "s32[5,3]", "s32[6,1]", "f32[6,3]", "s32[6,3]"], "(f32[5,3], s32[5,3])",
          **{**SCATTER, "to_apply": "%argmax"})
    # Batching: input dim 0 pairs with indices dim 0; updates [2,4,3] = batch [2,4] + window [3].
    check(O.SCATTER, ["f32[2,5,3]", "s32[2,4,1]", "f32[2,4,3]"], "f32[2,5,3]", update_window_dims="{2}",
          inserted_window_dims="{1}", input_batching_dims="{0}", scatter_indices_batching_dims="{0}",
          scatter_dims_to_operand_dims="{1}", index_vector_dim="2", to_apply="%add_f32")


@pytest.mark.parametrize("operands, change, message", [
    (["f32[5,3]", "s32[6,1]", "f32[6,3]"], dict(to_apply="%bad_add"), "to_apply computation must return f32[]"),
    (["f32[5,3]", "s32[6,1]", "f32[6,3]"], dict(to_apply="%add_s32"), "to_apply computation parameter 0 is s32[]"),
    (["f32[5,3]", "s32[6,1]", "f32[7,3]"], {}, "must match the indices' batch dims [6]"),
    (["f32[5,3]", "s32[6,1]", "f32[6,4]"], {}, "larger than operand dim 1"),
    (["f32[5,3]", "s32[6,1]", "s32[6,3]"], {}, "element type of input 0"),
    (["f32[5,3]", "s32[6,1]"], {}, "odd count of at least 3"),
    (["f32[5,3]", "s32[6,1]", "f32[6,3]"], dict(to_apply="%missing"), "does not name a computation"),
])
def test_scatter_errors(operands, change, message) -> None:
    check_error(O.SCATTER, operands, message, **{**SCATTER, **change})


# --- reductions and windows ---------------------------------------------------------------------------


def test_reduce() -> None:
    check(O.REDUCE, ["f32[4,5]", "f32[]"], "f32[4]", dimensions="{1}", to_apply="%add_f32")
    check(O.REDUCE, ["f32[4,5,6]", "f32[]"], "f32[5]", dimensions="{0,2}", to_apply="%add_f32")
    check(O.REDUCE, ["f32[4,5]", "f32[]"], "f32[]", dimensions="{0,1}", to_apply="%add_f32")
    check(O.REDUCE, ["f32[4,5]", "s32[4,5]", "f32[]", "s32[]"], "(f32[4], s32[4])", dimensions="{1}",
          to_apply="%argmax")


@pytest.mark.parametrize("operands, attrs, message", [
    (["f32[4,5]", "f32[]"], dict(dimensions="{1}", to_apply="%bad_add"), "to_apply computation must return f32[]"),
    (["f32[4,5]", "f32[]"], dict(dimensions="{2}", to_apply="%add_f32"), "dimension 2 is out of range"),
    (["f32[4,5]", "f32[1]"], dict(dimensions="{1}", to_apply="%add_f32"), "init value 0 must be a scalar"),
    (["f32[4,5]", "s32[]"], dict(dimensions="{1}", to_apply="%add_f32"), "init value 0 is s32[]"),
    (["f32[4,5]", "s32[4,5]", "f32[]", "s32[]"], dict(dimensions="{1}", to_apply="%add_f32"),
     "must take 4 parameters, but takes 2"),
    (["f32[4,5]", "s32[4,6]", "f32[]", "s32[]"], dict(dimensions="{1}", to_apply="%argmax"),
     "inputs must have the same dimensions"),
    (["f32[4,5]"], dict(dimensions="{1}", to_apply="%add_f32"), "even count"),
])
def test_reduce_errors(operands, attrs, message) -> None:
    check_error(O.REDUCE, operands, message, **attrs)


def test_reduce_window() -> None:
    # max pool 2x2 stride 2 over 4x6: (4-2)//2+1 = 2, (6-2)//2+1 = 3.
    check(O.REDUCE_WINDOW, ["f32[1,4,6,2]", "f32[]"], "f32[1,2,3,2]", window="{size=1x2x2x1 stride=1x2x2x1}",
          to_apply="%add_f32")
    # base 5 dilated by 2 -> 9, padded 1+9+1 = 11; window 3 dilated by 2 -> 5; (11-5)//2+1 = 4.
    check(O.REDUCE_WINDOW, ["f32[5]", "f32[]"], "f32[4]",
          window="{size=3 stride=2 pad=1_1 lhs_dilate=2 rhs_dilate=2}", to_apply="%add_f32")
    # cumsum-style window: size 5, pad 4_0 over 5 -> (4+5-5)//1+1 = 5.
    check(O.REDUCE_WINDOW, ["s32[5]", "s32[]"], "s32[5]", window="{size=5 pad=4_0}", to_apply="%add_s32")
    check(O.REDUCE_WINDOW, ["f32[5]", "f32[]"], "f32[0]", window="{size=7}", to_apply="%add_f32")  # too big
    check(O.REDUCE_WINDOW, ["f32[4,5]", "s32[4,5]", "f32[]", "s32[]"], "(f32[2,5], s32[2,5])",
          window="{size=3x1}", to_apply="%argmax")


def test_reduce_window_errors() -> None:
    check_error(O.REDUCE_WINDOW, ["f32[4,5]", "f32[]"], "window has 1 dimension(s) but the base shape has rank 2",
                window="{size=2}", to_apply="%add_f32")
    check_error(O.REDUCE_WINDOW, ["f32[4]", "f32[]"], "non-positive stride", window="{size=2 stride=0}",
                to_apply="%add_f32")
    check_error(O.REDUCE_WINDOW, ["f32[4]", "f32[]"], "must return f32[]", window="{size=2}", to_apply="%bad_add")


def test_select_and_scatter() -> None:
    check(O.SELECT_AND_SCATTER, ["f32[1,4,6,2]", "f32[1,2,3,2]", "f32[]"], "f32[1,4,6,2]",
          window="{size=1x2x2x1 stride=1x2x2x1}", select="%ge_f32", scatter="%add_f32")
    check_error(O.SELECT_AND_SCATTER, ["f32[1,4,6,2]", "f32[1,3,3,2]", "f32[]"], "window output dims [1, 2, 3, 2]",
                window="{size=1x2x2x1 stride=1x2x2x1}", select="%ge_f32", scatter="%add_f32")
    check_error(O.SELECT_AND_SCATTER, ["f32[1,4,6,2]", "f32[1,2,3,2]", "f32[]"], "select computation must return "
                "pred[]", window="{size=1x2x2x1 stride=1x2x2x1}", select="%add_f32", scatter="%add_f32")


# --- dot and convolution ------------------------------------------------------------------------------

DOT_OK = [
    (["f32[2,3]", "f32[3,4]"], None, dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}"), "f32[2,4]"),
    (["f32[3]", "f32[3]"], None, dict(lhs_contracting_dims="{0}", rhs_contracting_dims="{0}"), "f32[]"),
    (["f32[2]", "f32[3]"], None, {}, "f32[2,3]"),  # outer product: no contraction
    (["f32[5,2,3]", "f32[5,4,3]"], None, dict(lhs_batch_dims="{0}", rhs_batch_dims="{0}",
                                              lhs_contracting_dims="{2}", rhs_contracting_dims="{2}"), "f32[5,2,4]"),
    # batch [3] (lhs dim 0), lhs free [7], rhs free [2]
    (["f32[3,7,5]", "f32[5,3,2]"], None, dict(lhs_batch_dims="{0}", rhs_batch_dims="{1}",
                                              lhs_contracting_dims="{2}", rhs_contracting_dims="{0}"), "f32[3,7,2]"),
    (["bf16[2,3]", "bf16[3,4]"], "f32[2,4]", dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}"),
     "f32[2,4]"),
    (["s8[2,3]", "s8[3,4]"], "s32[2,4]", dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}"), "s32[2,4]"),
]


@pytest.mark.parametrize("operands, declared, attrs, expected", DOT_OK)
def test_dot(operands, declared, attrs, expected) -> None:
    check(O.DOT, operands, expected, declared, **attrs)


@pytest.mark.parametrize("operands, declared, attrs, message", [
    (["f32[2,3]", "f32[4,5]"], None, dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}"),
     "dot: lhs contracting dim 1 has size 3 but rhs contracting dim 0 has size 4"),
    (["f32[5,2,3]", "f32[6,3,4]"], None, dict(lhs_batch_dims="{0}", rhs_batch_dims="{0}",
                                              lhs_contracting_dims="{2}", rhs_contracting_dims="{1}"),
     "lhs batch dim 0 has size 5 but rhs batch dim 0 has size 6"),
    (["f32[2,3]", "f32[3,4]"], None, dict(lhs_contracting_dims="{2}", rhs_contracting_dims="{0}"),
     "lhs dimension 2 is out of range"),
    (["f32[2,3]", "f32[3,4]"], None, dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0,1}"),
     "lhs has 1 contracting dim(s) but rhs has 2"),
    (["f32[3,3]", "f32[3,3]"], None, dict(lhs_batch_dims="{1}", rhs_batch_dims="{0}", lhs_contracting_dims="{1}",
                                          rhs_contracting_dims="{1}"), "repeat a dimension"),
    (["s32[2,3]", "s32[3,4]"], "s8[2,4]", dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}"),
     "narrower"),
    (["f32[2,3]", "f16[3,4]"], None, dict(lhs_contracting_dims="{1}", rhs_contracting_dims="{0}"),
     "different element types"),
])
def test_dot_errors(operands, declared, attrs, message) -> None:
    check_error(O.DOT, operands, message, declared, **attrs)


CONV_OK = [
    # VALID 3x3 over 5x5: (5-3)//1+1 = 3.
    (["f32[1,5,5,2]", "f32[3,3,2,4]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f"), "f32[1,3,3,4]"),
    # SAME stride 2 over 7x7 with pad 1: (1+7+1-3)//2+1 = 4.
    (["f32[2,7,7,3]", "f32[3,3,3,8]"], dict(window="{size=3x3 stride=2x2 pad=1_1x1_1}",
                                            dim_labels="b01f_01io->b01f"), "f32[2,4,4,8]"),
    # rhs dilation 2: window 3 -> 5; (7-5)//1+1 = 3 (and 9 - 5 + 1 = 5 on the second dim).
    (["f32[1,7,9,1]", "f32[3,3,1,1]"], dict(window="{size=3x3 rhs_dilate=2x2}", dim_labels="b01f_01io->b01f"),
     "f32[1,3,5,1]"),
    # transposed conv: base 4 dilated by 2 -> 7, padded 2+7+2 = 11, window 3: (11-3)//1+1 = 9.
    (["f32[1,4,4,2]", "f32[3,3,2,5]"], dict(window="{size=3x3 pad=2_2x2_2 lhs_dilate=2x2}",
                                            dim_labels="b01f_01io->b01f"), "f32[1,9,9,5]"),
    # depthwise: 3 input features in 3 groups of 1; kernel input features 1, output features 6.
    (["f32[1,5,5,3]", "f32[3,3,1,6]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f",
                                            feature_group_count="3"), "f32[1,3,3,6]"),
    # batch groups: output batch 4/2 = 2.
    (["f32[4,5,5,2]", "f32[3,3,2,6]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f",
                                            batch_group_count="2"), "f32[2,3,3,6]"),
    # NCHW / OIHW labels; output features at dim 1.
    (["f32[1,2,5,6]", "f32[4,2,3,3]"], dict(window="{size=3x3}", dim_labels="bf01_oi01->bf01"), "f32[1,4,3,4]"),
    # output layout differs from input's: b01f input, output f01b.
    (["f32[2,5,5,3]", "f32[3,3,3,4]"], dict(window="{size=3x3}", dim_labels="b01f_01io->f01b"), "f32[4,3,3,2]"),
    # 1-D conv with stride 2 and negative padding: (-1 + 10 + 0 - 3)//2+1 = 4.
    (["f32[1,10,1]", "f32[3,1,1]"], dict(window="{size=3 stride=2 pad=-1_0}", dim_labels="b0f_0io->b0f"),
     "f32[1,4,1]"),
]


@pytest.mark.parametrize("operands, attrs, expected", CONV_OK)
def test_convolution(operands, attrs, expected) -> None:
    check(O.CONVOLUTION, operands, expected, **attrs)


@pytest.mark.parametrize("operands, attrs, message", [
    (["f32[1,5,5,2]", "f32[3,3,3,4]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f"),
     "input feature size 2 must equal kernel input feature size 3 times feature_group_count 1"),
    (["f32[1,5,5,2]", "f32[3,3,2,4]"], dict(window="{size=2x3}", dim_labels="b01f_01io->b01f"),
     "window size 2 of spatial dim 0 differs from the kernel's size 3"),
    (["f32[1,5,5,4]", "f32[3,3,2,3]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f",
                                            feature_group_count="2"), "multiple of feature_group_count 2"),
    (["f32[3,5,5,2]", "f32[3,3,2,4]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f",
                                            batch_group_count="2"), "input batch size 3 must be a multiple"),
    (["f32[1,5,2]", "f32[3,3,2,4]"], dict(window="{size=3x3}", dim_labels="b01f_01io->b01f"),
     "must have rank 4"),
    (["f32[1,5,5,2]", "f32[3,3,2,4]"], dict(window="{size=3}", dim_labels="b01f_01io->b01f"),
     "window has 1 dimension(s)"),
])
def test_convolution_errors(operands, attrs, message) -> None:
    check_error(O.CONVOLUTION, operands, message, **attrs)


# --- structure, calls and control flow -----------------------------------------------------------------


def test_tuples() -> None:
    check(O.TUPLE, ["f32[2]", "(s32[], token[])"], "(f32[2], (s32[], token[]))")
    check(O.TUPLE, [], "()")
    check(O.GET_TUPLE_ELEMENT, ["(f32[2], s32[])"], "s32[]", index="1")
    check_error(O.GET_TUPLE_ELEMENT, ["(f32[2], s32[])"], "index 2 is out of range", index="2")
    check_error(O.GET_TUPLE_ELEMENT, ["f32[2]"], "must be a tuple", index="0")
    check(O.OPTIMIZATION_BARRIER, ["(f32[2], s32[])"], "(f32[2], s32[])")


def test_call_and_fusion() -> None:
    check(O.CALL, ["f32[2]", "f32[2]"], "f32[2]", to_apply="%binary_f32")
    check(O.FUSION, ["f32[2,3]"], "f32[3,2]", calls="%fused", kind="kLoop")
    check_error(O.CALL, ["f32[2]", "f32[3]"], "to_apply computation parameter 1 is f32[2], but it is passed f32[3]",
                to_apply="%binary_f32")
    check_error(O.CALL, ["f32[2]"], "takes 2 parameter(s), but 1 are passed", to_apply="%binary_f32")
    check_error(O.FUSION, ["f32[2,3]"], "calls=%nope does not name a computation", calls="%nope", kind="kLoop")


def test_while() -> None:
    check(O.WHILE, ["(s32[], f32[3])"], "(s32[], f32[3])", condition="%cond", body="%body")
    check_error(O.WHILE, ["(s32[], f32[3])"], "condition computation must return pred[]", condition="%cond_s32",
                body="%body")
    check_error(O.WHILE, ["(s32[], f32[3])"], "body computation must return the loop state", condition="%cond",
                body="%body_bad")
    check_error(O.WHILE, ["(s32[], f32[4])"], "condition computation parameter 0", condition="%cond", body="%body")


def test_conditional() -> None:
    check(O.CONDITIONAL, ["pred[]", "f32[2]", "s32[]"], "f32[3]", true_computation="%br_true",
          false_computation="%br_false")
    check(O.CONDITIONAL, ["s32[]", "f32[2]", "s32[]", "f32[2]"], "f32[3]",
          branch_computations="{%br_true, %br_false, %br_true}")
    check_error(O.CONDITIONAL, ["s32[]", "f32[2]", "f32[]"], "branch 1 (%br_other) returns f32[4]",
                branch_computations="{%br_true, %br_other}")
    check_error(O.CONDITIONAL, ["f32[]", "f32[2]", "s32[]"], "must be pred[] or s32[]",
                true_computation="%br_true", false_computation="%br_false")
    check_error(O.CONDITIONAL, ["s32[]", "f32[2]"], "need 2 branch operand(s), got 1",
                branch_computations="{%br_true, %br_false}")


def test_map_and_sort() -> None:
    check(O.MAP, ["f32[4]", "f32[4]"], "pred[4]", to_apply="%map_gt", dimensions="{0}")
    check_error(O.MAP, ["f32[4]", "f32[5]"], "same dimensions", to_apply="%map_gt")
    check_error(O.MAP, ["s32[4]", "s32[4]"], "to_apply computation parameter 0 is f32[]", to_apply="%map_gt")
    check(O.SORT, ["f32[3,6]"], "f32[3,6]", dimensions="{1}", to_apply="%lt_f32", is_stable="true")
    check(O.SORT, ["f32[3,6]", "s32[3,6]"], "(f32[3,6], s32[3,6])", dimensions="{1}", to_apply="%sort2")
    check_error(O.SORT, ["f32[3,6]"], "to_apply computation must return pred[]", dimensions="{1}",
                to_apply="%add_f32")
    check_error(O.SORT, ["f32[3,6]", "s32[3,6]"], "must take 4 parameter", dimensions="{1}",
                to_apply="%lt_f32")
    check_error(O.SORT, ["f32[3,6]"], "dimension 2 is out of range", dimensions="{2}", to_apply="%lt_f32")
    check_error(O.SORT, ["f32[3,6]", "s32[3,5]"], "keys and values must have the same dimensions",
                dimensions="{1}", to_apply="%sort2")


def test_topk_custom_call_and_misc() -> None:
    check(O.TOPK, ["f32[3,8]"], "(f32[3,3], s32[3,3])", k="3", largest="true")
    check_error(O.TOPK, ["f32[3,8]"], "k=9 is out of range", k="9")
    check(O.CUSTOM_CALL, ["f32[3,8]"], "(f32[3,3], s32[3,3])", "(f32[3,3], s32[3,3])", custom_call_target='"TopK"')
    check(O.AFTER_ALL, ["token[]", "token[]"], "token[]")
    check(O.AFTER_ALL, [], "token[]")
    check_error(O.AFTER_ALL, ["f32[]"], "must be a token")
    check(O.PARTITION_ID, [], "u32[]")
    check(O.REPLICA_ID, [], "u32[]")
    check(O.RNG, ["f32[]", "f32[]"], "f32[2,3]", "f32[2,3]", distribution="rng_uniform")
    check_error(O.RNG, ["f32[]", "f32[]"], "must share an element type", "s32[2]", distribution="rng_uniform")
    check_error(O.RNG, ["s32[]", "s32[]"], "rng_normal needs a floating point result", "s32[2]",
                distribution="rng_normal")
    check(O.RNG_BIT_GENERATOR, ["u64[2]"], "(u64[2], u32[4,4])", "(u64[2], u32[4,4])", algorithm="rng_default")
    check_error(O.RNG_BIT_GENERATOR, ["u64[2]"], "must match the state operand", "(u64[3], u32[4])")
    check(O.RNG_GET_AND_UPDATE_STATE, [], "u64[2]", "u64[2]")


# --- through the builder: inferred shapes carry XLA's default layout --------------------------------------


def test_builder_prints_default_layouts() -> None:
    b = ComputationBuilder("main")
    x = b.parameter(Shape.array("f32", [2, 3]))
    y = b.parameter(Shape.array("f32", [3, 4]))
    d = b.dot(x, y, lhs_contracting_dims=(1,), rhs_contracting_dims=(0,))
    t = b.transpose(d, dimensions=(1, 0))
    c = b.compare(t, t, direction=hlo.ComparisonDirection.LT)
    module = module_of("m", b.build(b.tuple(t, c)))
    text = module.to_text()
    assert "%dot.1 = f32[2,4]{1,0} dot(" in text
    assert "%transpose.2 = f32[4,2]{1,0} transpose(" in text
    assert "%compare.3 = pred[4,2]{1,0} compare(" in text
    assert "%tuple.4 = (f32[4,2]{1,0}, pred[4,2]{1,0}) tuple(" in text
    hlo.verify(module)


def test_builder_reduce_with_called_computation() -> None:
    a = ComputationBuilder("add")
    p, q = a.parameter(scalar("f32")), a.parameter(scalar("f32"))
    add = a.build(a.add(p, q))
    e = ComputationBuilder("main")
    x = e.parameter(Shape.array("f32", [4, 5]))
    r = e.reduce(x, e.constant(0.0, "f32"), dimensions=(1,), to_apply=add)
    assert r.shape == Shape.array("f32", [4])
    module = module_of("m", e.build(r), e)
    assert "f32[4]{0} reduce(" in module.to_text()
    hlo.verify(module)


def test_builder_rejects_bad_operands() -> None:
    b = ComputationBuilder("main")
    x = b.parameter(Shape.array("f32", [2, 3]))
    y = b.parameter(Shape.array("f32", [3, 2]))
    with pytest.raises(ShapeError, match="add: operands must have the same dimensions"):
        b.add(x, y)
    with pytest.raises(ShapeError, match="not a permutation"):
        b.transpose(x, dimensions=(0, 0))


def test_tuple_result_is_a_tuple_shape() -> None:
    got = infer(O.SORT, ["f32[3]", "s32[3]"], dimensions="{0}", to_apply="%sort2")
    assert isinstance(got, TupleShape)
    assert str(got) == "(f32[3]{0}, s32[3]{0})"
