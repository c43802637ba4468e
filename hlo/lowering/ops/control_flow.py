"""Control flow and function calls.

* ``If``/``StatelessIf`` -> ``conditional`` on a pred; ``Case``/``StatelessCase`` -> ``conditional`` with
  ``branch_computations`` (an index outside [0, N) runs the last branch, in TF and XLA alike).
* ``While``/``StatelessWhile`` -> ``while``; loop-carried shapes and dtypes must stay the same
  (``parallel_iterations`` means nothing here). The condition may read any computed value, so a
  data-dependent trip count compiles.

A TensorList operand or result (``hlo/lowering/lists.py``) crosses the boundary as two tuple elements
(buffer, length); a list's buffer shape must stay the same through a loop, and a list result whose
length the body leaves unchanged keeps the length the list entered with (often a compile-time
constant, so a ``TensorListStack`` after the loop knows how many elements it stacks).
* ``PartitionedCall``/``StatefulPartitionedCall`` -> the called body, inlined.
* ``ToBool``: the predicate conversion If and While apply, as an op.

Every branch and loop computation takes one tuple parameter (the op's operands)
and returns a tuple (the op's results); see ``_function_body`` for how bodies
are lowered. Predicates follow TF's ``ToBool``: a scalar is true when non-zero
(bool, float32/64, int8/16/32/64, uint8 only: TF rejects other scalar types),
a tensor of any other rank when it has elements (known at compile time).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

import numpy as np

from hlo.attributes import ComparisonDirection
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering import tf_types
from hlo.lowering.context import LoweringContext
from hlo.lowering.lists import (ENTRY, Item, ListSpec, ListValue, Slot, after_loop, flat_shapes, flatten,
                                slot_compatible, slot_of, unflatten)
from hlo.lowering.ops._function_body import (BodyComputation, FunctionBody, body_computation, check_arity,
                                             function_body, inline_body, small_constants)
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode
from hlo.shapes import array_shape

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


def _slots(ctx: LoweringContext, items: Sequence[Item]) -> list[Slot]:
    return [slot_of(ctx, v, f"input {i}") for i, v in enumerate(items)]


def _unpack(ctx: LoweringContext, tup: Value, slots: Sequence[Slot]) -> list[Item]:
    n = len(flat_shapes(slots))
    return unflatten(slots, [ctx.b.get_tuple_element(tup, index=i) for i in range(n)])


def _branch_results(ctx: LoweringContext, built: Sequence[BodyComputation], bodies: Sequence[FunctionBody]) -> None:
    """Every branch must return the same static shapes (TF allows them to differ, XLA does not)."""
    first = built[0].results
    for b, body in zip(built[1:], bodies[1:]):
        for i, (a, r) in enumerate(zip(first, b.results)):
            if not slot_compatible(a, r):
                raise ctx.error(f"output {i} is {a.short()} in branch '{bodies[0].name}' but "
                                f"{r.short()} in branch '{body.name}'; XLA needs every branch to return "
                                "the same static shape")


def _conditional(ctx: LoweringContext, selector: Value, function_names: Sequence[str], roles: Sequence[str]) -> list[Item]:
    operands = ctx.inputs[1:]
    bodies = [function_body(ctx, name) for name in function_names]
    n_out = len(bodies[0].rets)
    for body, role in zip(bodies, roles):
        check_arity(ctx, body, role, len(operands), n_out)
    constants = {i - 1: v for i, v in small_constants(ctx, range(1, len(ctx.inputs))).items()}
    slots = _slots(ctx, operands)
    built = [body_computation(ctx, body, slots, role, constants) for body, role in zip(bodies, roles)]
    _branch_results(ctx, built, bodies)
    comps = [b.computation for b in built]
    state = ctx.b.tuple(*flatten(operands))
    if ctx.dtype(selector) is P.PRED:
        out = ctx.b.conditional(selector, state, state, true_computation=comps[0], false_computation=comps[1])
    else:
        out = ctx.b.conditional(selector, *([state] * len(comps)), branch_computations=comps)
    # what a list result's elements are known to be holds after the branch only if every branch agrees
    results = [replace(s, uniform=None) if isinstance(s, ListSpec) and any(b.results[i] != s for b in built) else s
               for i, s in enumerate(built[0].results)]
    return _unpack(ctx, out, results)


@register_lowering("ToBool", dtypes=tf_types.ALL)
def to_bool_op(ctx: LoweringContext) -> Value:
    return to_bool(ctx.b, ctx.inputs[0], ctx.error)


@register_lowering("If", "StatelessIf", dtypes=tf_types.ALL, type_attrs=("Tin", "Tout"), lists=True)
def if_(ctx: LoweringContext) -> list[Item]:
    pred = to_bool(ctx.b, ctx.inputs[0], ctx.error)
    return _conditional(ctx, pred, [ctx.attr_func("then_branch"), ctx.attr_func("else_branch")],
                        ["then_branch", "else_branch"])


@register_lowering("Case", "StatelessCase", dtypes=tf_types.ALL, type_attrs=("Tin", "Tout"), lists=True)
def case(ctx: LoweringContext) -> list[Item]:
    index = ctx.inputs[0]
    if ctx.dtype(index) is not P.S32 or ctx.shape(index).rank:
        raise ctx.error(f"branch_index must be an int32 scalar, got {index.shape.short()}")
    branches = list(ctx.attr_funcs("branches"))
    if not branches:
        raise ctx.error("Case needs at least one branch")
    return _conditional(ctx, index, branches, [f"branch {i}" for i in range(len(branches))])


def _bound(slots: Sequence[Slot], as_entry: set[int]) -> list[Slot]:
    """The loop body's argument types: a list whose elements are one known constant is bound with it
    (unless in ``as_entry``), any other list as ``ENTRY`` (its elements unknown to the body)."""
    out: list[Slot] = []
    for i, s in enumerate(slots):
        if isinstance(s, ListSpec):
            keep = s.uniform is not None and s.uniform.kind == "value" and i not in as_entry
            s = replace(s, uniform=s.uniform if keep else (ENTRY if s.uniform is not None else None))
        out.append(s)
    return out


@register_lowering("While", "StatelessWhile", dtypes=tf_types.ALL, lists=True)
def while_(ctx: LoweringContext) -> list[Item]:
    operands = list(ctx.inputs)
    n = len(operands)
    cond, body = function_body(ctx, ctx.attr_func("cond")), function_body(ctx, ctx.attr_func("body"))
    check_arity(ctx, cond, "cond", n, 1)
    check_arity(ctx, body, "body", n, n)
    # A loop invariant that is a small compile-time constant stays one inside the loop (shape arguments;
    # the length of a list the body returns unchanged).
    constants = small_constants(ctx, sorted(body.invariants()))
    slots = _slots(ctx, operands)
    as_entry: set[int] = set()
    while True:  # a list bound with constant elements the body does not keep is rebound as ENTRY, once
        bound = _bound(slots, as_entry)
        built = body_computation(ctx, body, bound, "body", constants)
        lost = {i for i, (b, r) in enumerate(zip(bound, built.results)) if isinstance(b, ListSpec)
                and isinstance(r, ListSpec) and b.uniform is not None and b.uniform.kind == "value"
                and r.uniform != b.uniform}
        if not lost:
            break
        as_entry |= lost
    for i, (before, after) in enumerate(zip(slots, built.results)):
        if not slot_compatible(before, after):
            raise ctx.error(f"loop variable {i} ('{body.arg_names[i]}') enters the loop as "
                            f"{before.short()} but the body returns {after.short()}; XLA needs "
                            "loop-carried shapes and dtypes to stay the same on every iteration")

    def finish(cb: ComputationBuilder, results: list[Item]) -> Value:
        pred = results[0]
        if not isinstance(pred, Value):
            raise ctx.error(f"the loop condition '{cond.name}' returns a TensorList, not a predicate")
        return to_bool(cb, pred, lambda msg: ctx.error(
            f"the loop condition '{cond.name}' returns {pred.shape.short()}: {msg}"))

    cond_comp = body_computation(ctx, cond, bound, "cond", constants, finish=finish).computation
    out = ctx.b.op(Opcode.WHILE, ctx.b.tuple(*flatten(operands)), condition=cond_comp, body=built.computation)
    results = _unpack(ctx, out, slots)
    for i, (entered, left) in enumerate(zip(operands, results)):
        if not isinstance(entered, ListValue) or not isinstance(left, ListValue):
            continue
        b, r = bound[i], built.results[i]
        assert isinstance(b, ListSpec) and isinstance(r, ListSpec)
        uniform = r.uniform if b.uniform is not None and b.uniform.kind == "value" else after_loop(entered.uniform, r.uniform)
        # a body that never changes this list's length: it leaves the loop as long as it entered
        results[i] = left.with_(uniform=uniform, length=entered.length if i in built.same_length else left.length)
    return results


@register_lowering("PartitionedCall", "StatefulPartitionedCall", dtypes=tf_types.ALL, type_attrs=("Tin", "Tout"),
                   lists=True)
def call(ctx: LoweringContext) -> list[Item]:
    body = function_body(ctx, ctx.attr_func("f"))
    check_arity(ctx, body, "called", len(ctx.inputs), None)
    return inline_body(ctx, body, ctx.inputs)
