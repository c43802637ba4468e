"""Evaluator rules for sort and topk.

sort permutes N same-dims operands along ``dimensions={d}`` by the comparator
(2N scalar parameters: operand 0 lhs, operand 0 rhs, operand 1 lhs, ...; true
when lhs goes first). Every sort here is stable, which is a valid result for
``is_stable=false`` too. A comparator that is one ``compare`` of some operand's
lhs and rhs parameters with LT or GT becomes a NumPy stable argsort on a key:
the values for FLOAT/SIGNED/UNSIGNED comparisons (NaNs sort last either way,
which XLA leaves unspecified), and XLA's total order for ``type=TOTALORDER``
(-NaN < -inf < ... < -0 < +0 < ... < inf < NaN). Any other comparator drives
a bottom-up merge sort that runs the comparator on whole arrays, one call per
merge step for all rows and all runs at once.

topk returns the k largest (``largest=true``, the default) or smallest values
along the last dim with their s32 indices, in XLA's total order, ties broken by
lower index.
"""

from __future__ import annotations

import numpy as np

from hlo.attributes import ComparisonDirection
from hlo.evaluator import Evaluator, eval_rule
from hlo.evaluator.callees import apply, body, compare_of_params, is_float, total_order_key
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def sort_key(x: np.ndarray, descending: bool, total_order: bool) -> np.ndarray:
    """An array whose ascending stable argsort is the comparator's order."""
    if is_float(x.dtype):
        if total_order:
            key = total_order_key(x)
            return ~key if descending else key
        wide = x.astype(np.float64)
        return -wide if descending else wide
    return ~x if descending else x  # ~ reverses signed, unsigned and bool order alike


def _key_sort(comp, n: int):
    """``(operand, descending, total_order)`` when the comparator is a plain LT/GT compare."""
    cmp = compare_of_params(comp)
    if cmp is None:
        return None
    i, j, direction, total = cmp
    if direction not in (ComparisonDirection.LT, ComparisonDirection.GT) or i // 2 != j // 2 or i == j \
            or i // 2 >= n:
        return None
    lhs_first = i < j
    return i // 2, (direction is ComparisonDirection.GT) == lhs_first, total


def merge_sort_order(less, operands: list[np.ndarray]) -> np.ndarray:
    """Stable permutation [rows, n] sorting each row of the [rows, n] operands by ``less``.

    ``less(lhs_list, rhs_list)`` gets lists of equal-dims arrays (one per operand) and
    returns a bool array: whether lhs goes strictly before rhs.
    """
    rows, n = operands[0].shape
    perm = np.broadcast_to(np.arange(n), (rows, n)).copy()
    r_idx = np.arange(rows)[:, None]
    width = 1
    while width < n:
        starts = np.arange(0, n, 2 * width)
        len_a = np.minimum(width, n - starts)
        len_b = np.clip(n - starts - width, 0, width)
        ia = np.zeros((rows, starts.size), np.int64)
        ib = np.zeros((rows, starts.size), np.int64)
        merged = perm.copy()
        for step in range(2 * width):
            active = step < len_a + len_b
            if not active.any():
                break
            a_ok, b_ok = ia < len_a, ib < len_b
            pa = perm[r_idx, np.minimum(starts + ia, n - 1)]
            pb = perm[r_idx, np.minimum(starts + width + ib, n - 1)]
            b_less = less([op[r_idx, pb] for op in operands], [op[r_idx, pa] for op in operands])
            take_b = b_ok & (~a_ok | b_less) & active
            take_a = a_ok & ~take_b & active
            dest = np.minimum(starts + step, n - 1)
            rows_on, cols_on = np.nonzero(active & (take_a | take_b))
            merged[rows_on, dest[cols_on]] = np.where(take_b, pb, pa)[rows_on, cols_on]
            ia += take_a
            ib += take_b
        perm = merged
        width *= 2
    return perm


@eval_rule(Opcode.SORT)
def _sort(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    (dim,) = inst.attr("dimensions", (vals[0].ndim - 1,))
    name = inst.attr("to_apply").name
    fast = _key_sort(body(ev.module, name), len(vals))
    if fast is not None:
        k, descending, total = fast
        perm = np.argsort(sort_key(vals[k], descending, total), axis=dim, kind="stable")
    else:
        moved = [np.moveaxis(v, dim, -1) for v in vals]
        lead = moved[0].shape[:-1]
        rows = int(np.prod(lead, dtype=np.int64))
        flat = [m.reshape(rows, m.shape[-1]) for m in moved]

        def less(lhs, rhs):
            args = [a for pair in zip(lhs, rhs) for a in pair]
            return apply(ev, name, args, lhs[0].shape)[0].astype(bool)

        order = merge_sort_order(less, flat) if flat[0].size else np.zeros(flat[0].shape, np.int64)
        perm = np.moveaxis(order.reshape(lead + (moved[0].shape[-1],)), -1, dim)
    results = tuple(np.take_along_axis(v, perm, axis=dim) for v in vals)
    return results if inst.shape.is_tuple else results[0]


@eval_rule(Opcode.TOPK)
def _topk(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    (x,) = vals
    k = inst.attr("k")
    largest = inst.attr("largest", True)
    order = np.argsort(sort_key(x, descending=largest, total_order=True), axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)
