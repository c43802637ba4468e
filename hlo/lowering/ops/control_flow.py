"""Control flow and function calls.

* ``If``/``StatelessIf`` -> ``conditional`` on a pred; ``Case``/``StatelessCase`` -> ``conditional`` with
  ``branch_computations`` (an index outside [0, N) runs the last branch, in TF and XLA alike).
* ``While``/``StatelessWhile`` -> ``while``; loop-carried shapes and dtypes must stay the same
  (``parallel_iterations`` means nothing here).
* ``PartitionedCall``/``StatefulPartitionedCall`` -> the called body, inlined.
* ``ToBool``: the predicate conversion If and While apply, as an op.

Every branch and loop computation takes one tuple parameter (the op's operands)
and returns a tuple (the op's results); see ``_function_body`` for how bodies
are lowered. Predicates follow TF's ``ToBool``: a scalar is true when non-zero
(bool, float32/64, int8/16/32/64, uint8 only: TF rejects other scalar types),
a tensor of any other rank when it has elements (known at compile time).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from hlo.attributes import ComparisonDirection
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation
from hlo.lowering import tf_types
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._function_body import (FunctionBody, body_computation, check_arity, function_body,
                                             inline_body, small_constants)
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode
from hlo.shapes import array_shape, tuple_shape

# Scalar element types TF's ToBool (core/kernels/functional_ops.cc) accepts; checked against TF 2.21 eager.
_SCALAR_PREDICATE_TYPES = frozenset({P.PRED, P.F32, P.F64, P.S8, P.S16, P.S32, P.S64, P.U8})


def to_bool(b: ComputationBuilder, v: Value, fail: Callable[[str], Exception]) -> Value:
    """TF's ToBool of ``v`` as a pred[] built with ``b``; ``fail(message)`` makes the error to raise."""
    shape = array_shape(v.shape)
    if shape.rank:
        return b.constant(np.asarray(shape.num_elements > 0), P.PRED)
    if shape.dtype is P.PRED:
        return v
    if shape.dtype not in _SCALAR_PREDICATE_TYPES:
        raise fail(f"TensorFlow cannot use a scalar {tf_types.hlo_tf_name(shape.dtype)} as a predicate (only "
                   "bool, float32, float64, int8, int16, int32, int64 and uint8 scalars)")
    zero = b.constant(np.zeros((), shape.dtype.numpy), shape.dtype)
    return b.compare(v, zero, direction=ComparisonDirection.NE)


def _unpack(ctx: LoweringContext, tup: Value, n: int) -> list[Value]:
    return [ctx.b.get_tuple_element(tup, index=i) for i in range(n)]


def _branch_results(ctx: LoweringContext, comps: Sequence[HloComputation], bodies: Sequence[FunctionBody]) -> None:
    """Every branch must return the same static shapes (TF allows them to differ, XLA does not)."""
    first = comps[0].program_shape.result
    for comp, body in zip(comps[1:], bodies[1:]):
        result = comp.program_shape.result
        for i, (a, r) in enumerate(zip(tuple_shape(first).elements, tuple_shape(result).elements)):
            if not a.compatible(r):
                raise ctx.error(f"output {i} is {a.short()} in branch '{bodies[0].name}' but "
                                f"{r.short()} in branch '{body.name}'; XLA needs every branch to return "
                                "the same static shape")


def _conditional(ctx: LoweringContext, selector: Value, function_names: Sequence[str], roles: Sequence[str]) -> list[Value]:
    operands = ctx.inputs[1:]
    bodies = [function_body(ctx, name) for name in function_names]
    n_out = len(bodies[0].rets)
    for body, role in zip(bodies, roles):
        check_arity(ctx, body, role, len(operands), n_out)
    constants = {i - 1: v for i, v in small_constants(ctx, range(1, len(ctx.inputs))).items()}
    shapes = [v.shape for v in operands]
    comps = [body_computation(ctx, body, shapes, role, constants) for body, role in zip(bodies, roles)]
    _branch_results(ctx, comps, bodies)
    state = ctx.b.tuple(*operands)
    if ctx.dtype(selector) is P.PRED:
        out = ctx.b.conditional(selector, state, state, true_computation=comps[0], false_computation=comps[1])
    else:
        out = ctx.b.conditional(selector, *([state] * len(comps)), branch_computations=comps)
    return _unpack(ctx, out, n_out)


@register_lowering("ToBool", dtypes=tf_types.ALL)
def to_bool_op(ctx: LoweringContext) -> Value:
    return to_bool(ctx.b, ctx.inputs[0], ctx.error)


@register_lowering("If", "StatelessIf", dtypes=tf_types.ALL, type_attrs=("Tin", "Tout"))
def if_(ctx: LoweringContext) -> list[Value]:
    pred = to_bool(ctx.b, ctx.inputs[0], ctx.error)
    return _conditional(ctx, pred, [ctx.attr_func("then_branch"), ctx.attr_func("else_branch")],
                        ["then_branch", "else_branch"])


@register_lowering("Case", "StatelessCase", dtypes=tf_types.ALL, type_attrs=("Tin", "Tout"))
def case(ctx: LoweringContext) -> list[Value]:
    index = ctx.inputs[0]
    if ctx.dtype(index) is not P.S32 or ctx.shape(index).rank:
        raise ctx.error(f"branch_index must be an int32 scalar, got {index.shape.short()}")
    branches = list(ctx.attr_funcs("branches"))
    if not branches:
        raise ctx.error("Case needs at least one branch")
    return _conditional(ctx, index, branches, [f"branch {i}" for i in range(len(branches))])


@register_lowering("While", "StatelessWhile", dtypes=tf_types.ALL)
def while_(ctx: LoweringContext) -> list[Value]:
    operands = list(ctx.inputs)
    n = len(operands)
    cond, body = function_body(ctx, ctx.attr_func("cond")), function_body(ctx, ctx.attr_func("body"))
    check_arity(ctx, cond, "cond", n, 1)
    check_arity(ctx, body, "body", n, n)
    # A loop invariant that is a small compile-time constant stays one inside the loop (shape arguments).
    constants = small_constants(ctx, sorted(body.invariants()))
    shapes = [v.shape for v in operands]
    body_comp = body_computation(ctx, body, shapes, "body", constants)
    for i, (before, after) in enumerate(zip(shapes, tuple_shape(body_comp.program_shape.result).elements)):
        if not before.compatible(after):
            raise ctx.error(f"loop variable {i} ('{body.arg_names[i]}') enters the loop as "
                            f"{before.short()} but the body returns {after.short()}; XLA needs "
                            "loop-carried shapes and dtypes to stay the same on every iteration")

    def finish(cb: ComputationBuilder, results: list[Value]) -> Value:
        return to_bool(cb, results[0], lambda msg: ctx.error(
            f"the loop condition '{cond.name}' returns {results[0].shape.short()}: {msg}"))

    cond_comp = body_computation(ctx, cond, shapes, "cond", constants, finish=finish)
    out = ctx.b.op(Opcode.WHILE, ctx.b.tuple(*operands), condition=cond_comp, body=body_comp)
    return _unpack(ctx, out, n)


@register_lowering("PartitionedCall", "StatefulPartitionedCall", dtypes=tf_types.ALL, type_attrs=("Tin", "Tout"))
def call(ctx: LoweringContext) -> list[Value]:
    body = function_body(ctx, ctx.attr_func("f"))
    check_arity(ctx, body, "called", len(ctx.inputs), None)
    return inline_body(ctx, body, ctx.inputs)
