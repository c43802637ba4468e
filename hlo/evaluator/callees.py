"""Calling the scalar computations of reduce, reduce-window, select-and-scatter, scatter and sort.

Those opcodes apply a small scalar computation (``to_apply``, ``select``,
``scatter``, the sort comparator) to many elements. Two ways to evaluate it:

* ``scalar_fn`` recognises a body that is one op on parameters (``add(p0, p1)``,
  ``maximum``, ``compare(p0, p1), direction=LT``, or just returning a parameter)
  and gives the matching NumPy function, so these rules need no other rules;
* ``apply`` falls back to the evaluator: the body is elementwise scalar code, so
  it runs once on whole arrays (``Evaluator.call(..., batch=)``); a body that is
  not elementwise-safe (it broadcasts or reshapes) is run once per element.

``combine_at`` applies a binary combiner to target elements in a given order,
one round per repeat of a target, as a sequential scatter would.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hlo.attributes import ComparisonDirection, ComparisonType
from hlo.errors import HloEvaluationError
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Group, Opcode

ArrayFn = Callable[..., list]  # arrays in, list of arrays out

# Binary ops with a NumPy reduction; and/or/xor are logical on pred and bitwise on integers.
REDUCIBLE_UFUNCS: dict[Opcode, np.ufunc] = {
    Opcode.ADD: np.add, Opcode.MULTIPLY: np.multiply, Opcode.MAXIMUM: np.maximum,
    Opcode.MINIMUM: np.minimum, Opcode.AND: np.bitwise_and, Opcode.OR: np.bitwise_or,
    Opcode.XOR: np.bitwise_xor,
}
_COMPARE_UFUNCS = {
    ComparisonDirection.EQ: np.equal, ComparisonDirection.NE: np.not_equal,
    ComparisonDirection.LT: np.less, ComparisonDirection.LE: np.less_equal,
    ComparisonDirection.GT: np.greater, ComparisonDirection.GE: np.greater_equal,
}


def body(module, name: str) -> HloComputation:
    """Computation ``name``, looking through wrappers whose root just calls another computation
    with the wrapper's parameters in order (tf2xla emits those around reducers and comparators)."""
    comp = module.computation(name)
    for _ in range(16):
        root = comp.root
        if root.opcode is not Opcode.CALL or len(root.called_computations) != 1:
            break
        if [_param_index(comp, o) for o in root.operands] != list(range(len(comp.parameters))):
            break
        comp = module.computation(root.called_computations[0])
    return comp


_FORWARDING = Group.FORWARDING | {Opcode.CONVERT}  # (a convert forwards when its type is the operand's)


def _source(comp: HloComputation, name: str) -> HloInstruction:
    """The instruction whose value ``name`` forwards unchanged (through same-shape reshape, copy,
    convert and get-tuple-element of a tuple), as tf2xla wraps results."""
    inst = comp[name]
    for _ in range(64):
        if inst.opcode in _FORWARDING and comp[inst.operands[0]].shape.compatible(inst.shape):
            inst = comp[inst.operands[0]]
        elif inst.opcode is Opcode.GET_TUPLE_ELEMENT and comp[inst.operands[0]].opcode is Opcode.TUPLE:
            inst = comp[comp[inst.operands[0]].operands[inst.attr("index")]]
        else:
            break
    return inst


def _param_index(comp: HloComputation, name: str) -> int | None:
    inst = _source(comp, name)
    return inst.parameter_index if inst.opcode is Opcode.PARAMETER else None


def binary_ufunc(comp: HloComputation) -> np.ufunc | None:
    """The ufunc of a two-parameter body ``ROOT op(p0, p1)`` (either order), else None."""
    params = comp.parameters
    root = _source(comp, comp.root_name)
    if len(params) != 2 or root.opcode not in REDUCIBLE_UFUNCS or len(root.operands) != 2:
        return None
    if any(not p.shape.compatible(root.shape) for p in params):
        return None  # a body that converts is not a plain reduction
    idx = [k for k in (_param_index(comp, o) for o in root.operands) if k is not None]
    if sorted(idx) != [0, 1]:
        return None
    return REDUCIBLE_UFUNCS[root.opcode]


def compare_of_params(comp: HloComputation) -> tuple[int, int, ComparisonDirection, bool] | None:
    """``(i, j, direction, total_order)`` for a body ``ROOT compare(p_i, p_j)``, else None."""
    root = _source(comp, comp.root_name)
    if root.opcode is not Opcode.COMPARE:
        return None
    i, j = (_param_index(comp, o) for o in root.operands)
    if i is None or j is None:
        return None
    total = root.attr("type") is ComparisonType.TOTALORDER
    return i, j, root.attr("direction"), total


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordered as XLA's TOTALORDER: -NaN < -inf < ... < -0 < +0 < ... < inf < NaN."""
    x = np.asarray(x)
    if not is_float(x.dtype):
        return x
    bits = x.dtype.itemsize * 8
    ints = np.array(x, order="C").view(np.dtype(f"int{bits}"))  # (ascontiguousarray makes 0-d 1-d)
    low = np.array((1 << (bits - 1)) - 1, ints.dtype)
    return ints ^ ((ints >> (bits - 1)) & low)


def is_float(dtype: np.dtype) -> bool:
    return dtype.kind == "f" or (dtype.kind == "V" and "float" in dtype.name)


def _compare_fn(i: int, j: int, direction: ComparisonDirection, total: bool) -> ArrayFn:
    ufunc = _COMPARE_UFUNCS[direction]
    if total:
        return lambda *a: [ufunc(total_order_key(a[i]), total_order_key(a[j]))]
    return lambda *a: [ufunc(a[i], a[j])]


def scalar_fn(comp: HloComputation) -> ArrayFn | None:
    """A NumPy function for a one-op body (a returned parameter, a binary op, a compare), else None."""
    root = _source(comp, comp.root_name)
    if root.opcode is Opcode.PARAMETER:
        k = root.parameter_index
        return lambda *a: [a[k]]
    cmp = compare_of_params(comp)
    if cmp is not None:
        return _compare_fn(*cmp)
    if root.opcode in REDUCIBLE_UFUNCS and len(root.operands) == 2:
        idx = [k for k in (_param_index(comp, o) for o in root.operands) if k is not None]
        params = comp.parameters
        if len(idx) == 2 and all(params[k].shape.compatible(root.shape) for k in idx):
            ufunc, (i, j) = REDUCIBLE_UFUNCS[root.opcode], idx
            return lambda *a: [ufunc(a[i], a[j])]
    return None


def apply(ev, name: str, args: list[np.ndarray], batch: tuple[int, ...]) -> list[np.ndarray]:
    """Evaluate scalar computation ``name`` elementwise over arrays of dims ``batch``; a list of results."""
    fast = scalar_fn(body(ev.module, name))
    if fast is not None:
        return [np.broadcast_to(np.asarray(r), batch) for r in fast(*args)]
    args = [np.broadcast_to(a, batch) for a in args]
    try:
        return _as_list(ev.call(name, args, batch=batch))
    except HloEvaluationError:
        if not batch or int(np.prod(batch)) <= 1:
            raise
    # Not elementwise-safe: one call per element.
    per_elem = [_as_list(ev.call(name, [np.asarray(a[idx]) for a in args])) for idx in np.ndindex(*batch)]
    return [np.stack([r[k] for r in per_elem]).reshape(batch) for k in range(len(per_elem[0]))]


def _as_list(value) -> list[np.ndarray]:
    return list(value) if isinstance(value, tuple) else [value]


def combine_at(ev, name: str, outs: list[np.ndarray], targets: np.ndarray, updates: list[np.ndarray]) -> None:
    """For each (target t, update) in order: ``outs[..][t] = f(outs[..][t], updates[..])``.

    ``outs`` are flat arrays, updated in place; ``updates`` are flat and parallel to ``targets``."""
    if targets.size == 0:
        return
    ufunc = binary_ufunc(body(ev.module, name)) if len(outs) == 1 else None
    if ufunc is not None:
        ufunc.at(outs[0], targets, updates[0])
        return
    # Round r applies the r-th update of every target; targets within a round are distinct.
    order = np.argsort(targets, kind="stable")
    sorted_t = targets[order]
    first = np.searchsorted(sorted_t, sorted_t, side="left")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size) - first
    for r in range(int(rank.max()) + 1):
        sel = np.nonzero(rank == r)[0]
        t = targets[sel]
        results = apply(ev, name, [o[t] for o in outs] + [u[sel] for u in updates], (sel.size,))
        for o, res in zip(outs, results):
            o[t] = res
