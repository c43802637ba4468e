"""Shape rules of structure, control flow and calls: tuple, get-tuple-element, call, fusion, while,
conditional, map, sort, topk, opt-barrier, custom-call, tokens, ids and random numbers.

Called computations are checked through their signatures (``ctx.called``):
the operands passed must match the parameters (layouts ignored), and the
result is the callee's result.
"""

from __future__ import annotations

from hlo.attributes import Ident
from hlo.dtypes import PrimitiveType
from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import (
    PRED, S32, array, called, called_list, check_call_signature, check_dims_in_range, check_scalar_function,
    declared_array, expect_array, expect_same_dims, expect_scalar, fail, int_list, operand, short,
    with_default_layout,
)
from hlo.shapes import Shape, ShapeLike, TupleShape

O = Opcode
TOKEN = PrimitiveType.TOKEN


@shape_rule(O.TUPLE)
def tuple_(ctx: ShapeContext) -> TupleShape:
    return TupleShape(tuple(with_default_layout(s) for s in ctx.operands))


@shape_rule(O.GET_TUPLE_ELEMENT)
def get_tuple_element(ctx: ShapeContext) -> ShapeLike:
    x = ctx.operands[0]
    if not isinstance(x, TupleShape):
        raise fail(ctx, f"the operand must be a tuple, got {short(x)}")
    index = ctx.attr("index")
    if not 0 <= index < len(x.elements):
        raise fail(ctx, f"index {index} is out of range for {short(x)} ({len(x.elements)} elements)")
    return with_default_layout(x.elements[index])


@shape_rule(O.CALL, O.FUSION)
def call(ctx: ShapeContext) -> ShapeLike:
    key = ctx.opcode.calls[0]  # call: to_apply=, fusion: calls=
    sig = called(ctx, key)
    check_call_signature(ctx, key, sig, ctx.operands)
    return with_default_layout(sig.result)


@shape_rule(O.WHILE)
def while_(ctx: ShapeContext) -> ShapeLike:
    state = ctx.operands[0]
    cond, body = called(ctx, "condition"), called(ctx, "body")
    check_call_signature(ctx, "condition", cond, [state])
    check_call_signature(ctx, "body", body, [state])
    if not cond.result.compatible(Shape.array(PRED, ())):
        raise fail(ctx, f"condition computation must return pred[], but returns {short(cond.result)}")
    if not body.result.compatible(state):
        raise fail(ctx, f"body computation must return the loop state {short(state)}, "
                        f"but returns {short(body.result)}")
    return with_default_layout(state)


@shape_rule(O.CONDITIONAL)
def conditional(ctx: ShapeContext) -> ShapeLike:
    if not ctx.operands:
        raise fail(ctx, "needs a branch index operand")
    index = expect_scalar(ctx, ctx.operands[0], "the branch index")
    if index.dtype is PRED:
        if "branch_computations" in ctx.attrs:
            branches = called_list(ctx, "branch_computations")
        else:
            branches = [(k, called(ctx, k)) for k in ("true_computation", "false_computation")]
        if len(branches) != 2:
            raise fail(ctx, f"a pred branch index selects between 2 computations, got {len(branches)}")
    elif index.dtype is S32:
        branches = called_list(ctx, "branch_computations")
        if not branches:
            raise fail(ctx, "branch_computations must name at least one computation")
    else:
        raise fail(ctx, f"the branch index must be pred[] or s32[], got {short(index)}")
    args = ctx.operands[1:]
    if len(args) != len(branches):
        raise fail(ctx, f"{len(branches)} branch computation(s) need {len(branches)} branch operand(s), "
                        f"got {len(args)}")
    result = branches[0][1].result
    for i, ((name, sig), arg) in enumerate(zip(branches, args)):
        check_call_signature(ctx, f"branch {i} (%{name})", sig, [arg])
        if not sig.result.compatible(result):
            raise fail(ctx, f"branch {i} (%{name}) returns {short(sig.result)} but branch 0 returns "
                            f"{short(result)}")
    return with_default_layout(result)


@shape_rule(O.MAP)
def map_(ctx: ShapeContext) -> Shape:
    if not ctx.operands:
        raise fail(ctx, "needs at least one operand")
    xs = [operand(ctx, i) for i in range(len(ctx.operands))]
    expect_same_dims(ctx, xs)
    dims = int_list(ctx, "dimensions") if "dimensions" in ctx.attrs else None
    if dims is not None and list(dims) != list(range(xs[0].rank)):
        raise fail(ctx, f"dimensions={list(dims)} must list every operand dimension in order")
    sig = called(ctx, "to_apply")
    result = sig.result
    if isinstance(result, TupleShape) or result.rank != 0:
        raise fail(ctx, f"to_apply computation must return a scalar, but returns {short(result)}")
    check_scalar_function(ctx, "to_apply", sig, [x.dtype for x in xs], [result.dtype])
    return array(result.dtype, xs[0].dims)


@shape_rule(O.SORT)
def sort(ctx: ShapeContext) -> ShapeLike:
    if not ctx.operands:
        raise fail(ctx, "needs at least one operand")
    xs = [operand(ctx, i) for i in range(len(ctx.operands))]
    expect_same_dims(ctx, xs, "keys and values")
    dims = int_list(ctx, "dimensions")
    if len(dims) != 1:
        raise fail(ctx, f"dimensions={list(dims)} must name exactly one dimension")
    check_dims_in_range(ctx, dims, xs[0].rank, "dimensions")
    pairs = [t for x in xs for t in (x.dtype, x.dtype)]
    check_scalar_function(ctx, "to_apply", called(ctx, "to_apply"), pairs, [PRED])
    results = [array(x.dtype, x.dims) for x in xs]
    return results[0] if len(results) == 1 else TupleShape(tuple(results))


@shape_rule(O.TOPK)
def topk(ctx: ShapeContext) -> TupleShape:
    x = operand(ctx, 0, "the operand")
    k = ctx.attr("k")
    if x.rank < 1:
        raise fail(ctx, f"the operand must have rank at least 1, got {short(x)}")
    if not 0 <= k <= x.dims[-1]:
        raise fail(ctx, f"k={k} is out of range for the last dimension of {short(x)}")
    dims = (*x.dims[:-1], k)
    return TupleShape((array(x.dtype, dims), array(S32, dims)))


@shape_rule(O.OPTIMIZATION_BARRIER)
def optimization_barrier(ctx: ShapeContext) -> ShapeLike:
    return with_default_layout(ctx.operands[0])


@shape_rule(O.CUSTOM_CALL)
def custom_call(ctx: ShapeContext) -> ShapeLike:
    ctx.attr("custom_call_target")
    return ctx.require_declared()


@shape_rule(O.AFTER_ALL)
def after_all(ctx: ShapeContext) -> Shape:
    for i, s in enumerate(ctx.operands):
        if isinstance(s, TupleShape) or s.dtype is not TOKEN:
            raise fail(ctx, f"operand {i} must be a token, got {short(s)}")
    return Shape(TOKEN)


@shape_rule(O.PARTITION_ID, O.REPLICA_ID)
def replica_id(ctx: ShapeContext) -> Shape:
    return array(PrimitiveType.U32, ())


@shape_rule(O.RNG)
def rng(ctx: ShapeContext) -> Shape:
    a, b = expect_scalar(ctx, ctx.operands[0], "parameter a"), expect_scalar(ctx, ctx.operands[1], "parameter b")
    out = declared_array(ctx)
    if a.dtype != b.dtype or a.dtype != out.dtype:
        raise fail(ctx, f"parameters {short(a)}, {short(b)} and the result {short(out)} must share an element type")
    distribution = ctx.attr("distribution")
    text = distribution.text if isinstance(distribution, Ident) else str(distribution)
    if text == "rng_normal" and not out.dtype.is_float:
        raise fail(ctx, f"rng_normal needs a floating point result, got {short(out)}")
    if text == "rng_uniform" and not (out.dtype.is_float or out.dtype.is_integral):
        raise fail(ctx, f"rng_uniform needs a numeric result, got {short(out)}")
    if text not in ("rng_normal", "rng_uniform"):
        raise fail(ctx, f"unknown distribution {text}")
    return out


@shape_rule(O.RNG_BIT_GENERATOR)
def rng_bit_generator(ctx: ShapeContext) -> ShapeLike:
    state = operand(ctx, 0, "the state")
    out = ctx.require_declared()
    if not isinstance(out, TupleShape) or len(out.elements) != 2:
        raise fail(ctx, f"the result must be a (state, values) tuple, got {short(out)}")
    if not out.elements[0].compatible(state):
        raise fail(ctx, f"the result's state {short(out.elements[0])} must match the state operand {short(state)}")
    values = expect_array(ctx, out.elements[1], "the generated values")
    if not values.dtype.is_integral:
        raise fail(ctx, f"generated values must be integers, got {short(values)}")
    return out


@shape_rule(O.RNG_GET_AND_UPDATE_STATE)
def rng_get_and_update_state(ctx: ShapeContext) -> Shape:
    return array(PrimitiveType.U64, (2,))
