"""Evaluator rules for control flow and called computations: call, fusion,
while, conditional, map, custom-call.

* call and fusion evaluate the called computation (``to_apply`` / ``calls``) on
  the operands; under a batched call the batch passes through.
* while runs ``body`` while ``condition`` is true, at most
  ``MAX_WHILE_ITERATIONS`` times; a loop that runs longer is an error.
* conditional with a pred runs ``true_computation`` (or branch 0) when true,
  else ``false_computation`` (branch 1); with an s32 index it runs
  ``branch_computations[index]``, and an index out of range runs the last branch.
* map applies ``to_apply`` elementwise: once on whole arrays when its body is
  elementwise, else once per element (see ``callees.apply``).
* custom-call dispatches on ``custom_call_target`` through ``CUSTOM_CALLS``;
  ``register_custom_call`` adds targets. Registered here: ``TopK`` (what TF's
  XLA emits for ``tf.math.top_k``) and ``Sharding`` (an identity on one device).

while, conditional and custom-call cannot run under a batched call; they raise,
so ``callees.apply`` falls back to one call per element.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hlo.errors import HloEvaluationError
from hlo.evaluator import Evaluator, Value, eval_rule
from hlo.evaluator.structural import batch_dims, operand_shapes
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape, TupleShape

MAX_WHILE_ITERATIONS = 1 << 24

CustomCallFn = Callable[[Evaluator, HloInstruction, list], Value]
CUSTOM_CALLS: dict[str, CustomCallFn] = {}


def register_custom_call(target: str, fn: CustomCallFn | None = None):
    """Register ``fn(evaluator, instruction, operand_values) -> value`` for a custom-call target.

    Usable directly or as a decorator; registering a target twice is an error.
    """
    def register(f: CustomCallFn) -> CustomCallFn:
        if target in CUSTOM_CALLS:
            raise ValueError(f"custom-call target {target!r} is already registered")
        CUSTOM_CALLS[target] = f
        return f
    return register(fn) if fn is not None else register


def _callee(inst: HloInstruction, key: str) -> str:
    ref = inst.attr(key)
    if ref is None:
        raise HloEvaluationError(f"%{inst.name}: {inst.opcode.text} needs {key}=")
    return ref.name


def _unbatched(ev, inst, vals) -> None:
    if batch_dims(vals, operand_shapes(ev, inst)):
        raise HloEvaluationError(f"%{inst.name}: {inst.opcode.text} cannot run elementwise on a batch")


@eval_rule(Opcode.CALL)
def _call(ev, inst, vals):
    return ev.call(_callee(inst, "to_apply"), list(vals), batch=batch_dims(vals, operand_shapes(ev, inst)))


@eval_rule(Opcode.FUSION)
def _fusion(ev, inst, vals):
    return ev.call(_callee(inst, "calls"), list(vals), batch=batch_dims(vals, operand_shapes(ev, inst)))


@eval_rule(Opcode.WHILE)
def _while(ev, inst, vals):
    _unbatched(ev, inst, vals)
    condition, body = _callee(inst, "condition"), _callee(inst, "body")
    (state,) = vals
    for _ in range(MAX_WHILE_ITERATIONS):
        if not bool(ev.call(condition, [state])):
            return state
        state = ev.call(body, [state])
    raise HloEvaluationError(f"%{inst.name}: while loop still running after {MAX_WHILE_ITERATIONS} iterations "
                             f"(condition %{condition} never became false)")


@eval_rule(Opcode.CONDITIONAL)
def _conditional(ev, inst, vals):
    _unbatched(ev, inst, vals)
    selector, operands = np.asarray(vals[0]), vals[1:]
    if "branch_computations" in inst.attrs:
        branches = [ref.name for ref in inst.attr("branch_computations")]
    else:
        branches = [_callee(inst, "true_computation"), _callee(inst, "false_computation")]
    if selector.dtype == np.bool_:
        index = 0 if bool(selector) else 1
    else:
        index = int(selector)
        if not 0 <= index < len(branches):
            index = len(branches) - 1  # XLA runs the last branch for an out-of-range index
    if len(operands) != len(branches):
        raise HloEvaluationError(f"%{inst.name}: {len(branches)} branches but {len(operands)} branch operands")
    return ev.call(branches[index], [operands[index]])


@eval_rule(Opcode.MAP)
def _map(ev, inst, vals):
    from hlo.evaluator.callees import apply

    shape = np.shape(vals[0])
    args = [np.asarray(v) for v in vals]
    if not args[0].size:
        return np.zeros(shape, inst.shape.dtype.numpy)
    return apply(ev, _callee(inst, "to_apply"), args, shape)[0]


@eval_rule(Opcode.CUSTOM_CALL)
def _custom_call(ev, inst, vals):
    target = inst.attr("custom_call_target")
    fn = CUSTOM_CALLS.get(target)
    if fn is None:
        raise HloEvaluationError(f"%{inst.name}: the evaluator has no implementation of custom-call target "
                                 f"{target!r}; add one with hlo.evaluator.control.register_custom_call")
    _unbatched(ev, inst, vals)
    return fn(ev, inst, vals)


# --- custom-call targets -----------------------------------------------------


@register_custom_call("TopK")
def _topk(ev, inst, vals):
    """``(values, s32 indices)`` of the first k elements along the last dim in the comparator's
    order (a stable sort: ties keep the lower index). k is the result's minor dim."""
    from hlo.evaluator.callees import apply
    from hlo.evaluator.sorting import merge_sort_order

    (x,) = vals
    values_shape = inst.shape.elements[0] if isinstance(inst.shape, TupleShape) and len(inst.shape.elements) == 2 else None
    if not isinstance(values_shape, Shape) or x.ndim == 0:
        raise HloEvaluationError(f"%{inst.name}: TopK takes one array and returns (values, indices)")
    k = values_shape.dims[-1]
    refs = inst.attr("called_computations", ())
    refs = refs if isinstance(refs, tuple) else (refs,)
    if len(refs) != 1:
        raise HloEvaluationError(f"%{inst.name}: TopK needs one comparator in called_computations")
    comparator = refs[0].name
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    index = np.broadcast_to(np.arange(n, dtype=np.int32), rows.shape)
    params = len(ev.module.computation(comparator).parameters)

    def less(lhs, rhs):
        args = [lhs[0], rhs[0], lhs[1], rhs[1]][:params]
        return apply(ev, comparator, args, lhs[0].shape)[0].astype(bool)

    order = merge_sort_order(less, [rows, index]) if rows.size else np.zeros(rows.shape, np.int64)
    order = order[:, :k]
    values = np.take_along_axis(rows, order, axis=-1).reshape(x.shape[:-1] + (k,))
    return values, order.astype(np.int32).reshape(x.shape[:-1] + (k,))


@register_custom_call("Sharding")
def _sharding(ev, inst, vals):
    return vals[0]
