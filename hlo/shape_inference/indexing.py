"""Shape rules of gather and scatter, with XLA's full dimension numbers (including batching dims).

Conventions: when ``index_vector_dim`` equals the rank of the indices, the
indices are read as if they had a trailing dimension of size 1 (the
"expanded" indices). The batch dimensions are the expanded indices' dims
other than ``index_vector_dim``; the window (offset) dimensions are the
operand dims that are neither collapsed/inserted nor batching dims.
"""

from __future__ import annotations

from typing import Sequence

from hlo.attributes import IndexCheck
from hlo.index_check import scatter_structure_problem, structure_problem
from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import (
    array, check_combiner, check_dims_in_range, expect_same_dims, fail, int_list, operand, short,
)
from hlo.shapes import Shape, ShapeLike, TupleShape

O = Opcode


def _expanded_indices(ctx: ShapeContext, indices: Shape) -> tuple[int, list[int]]:
    if not indices.dtype.is_integral:
        raise fail(ctx, f"indices must have an integral element type, got {short(indices)}")
    ivd = ctx.attr("index_vector_dim")
    if not 0 <= ivd <= indices.rank:
        raise fail(ctx, f"index_vector_dim={ivd} is out of range for indices {short(indices)}")
    expanded = list(indices.dims) + ([1] if ivd == indices.rank else [])
    return ivd, expanded


def _check_batching(ctx: ShapeContext, x: Shape, indices: Shape, ivd: int, expanded: list[int],
                    operand_key: str, indices_key: str, index_map: Sequence[int], index_map_key: str,
                    collapsed: Sequence[int], collapsed_key: str) -> tuple[int, ...]:
    """Checks shared by gather and scatter; returns the operand batching dims."""
    obd = int_list(ctx, operand_key, ())
    ibd = int_list(ctx, indices_key, ())
    check_dims_in_range(ctx, collapsed, x.rank, collapsed_key, increasing=True)
    check_dims_in_range(ctx, obd, x.rank, operand_key, increasing=True)
    check_dims_in_range(ctx, ibd, indices.rank, indices_key)
    if ivd in ibd:
        raise fail(ctx, f"{indices_key}={list(ibd)} must not contain index_vector_dim {ivd}")
    if set(collapsed) & set(obd):
        raise fail(ctx, f"{collapsed_key}={list(collapsed)} and {operand_key}={list(obd)} must be disjoint")
    if len(index_map) != expanded[ivd]:
        raise fail(ctx, f"{index_map_key}={list(index_map)} must have one entry per index component "
                        f"({expanded[ivd]}, the size of index_vector_dim {ivd})")
    check_dims_in_range(ctx, index_map, x.rank, index_map_key)
    if set(index_map) & set(obd):
        raise fail(ctx, f"{index_map_key}={list(index_map)} and {operand_key}={list(obd)} must be disjoint")
    if len(obd) != len(ibd):
        raise fail(ctx, f"{operand_key}={list(obd)} and {indices_key}={list(ibd)} must have the same length")
    for od, idd in zip(obd, ibd):
        if x.dims[od] != expanded[idd]:
            raise fail(ctx, f"operand batching dim {od} has size {x.dims[od]} but indices batching dim {idd} "
                            f"has size {expanded[idd]}")
    return obd


@shape_rule(O.GATHER)
def gather(ctx: ShapeContext) -> Shape:
    x, indices = operand(ctx, 0, "the operand"), operand(ctx, 1, "the start indices")
    ivd, expanded = _expanded_indices(ctx, indices)
    offset_dims = int_list(ctx, "offset_dims")
    collapsed = int_list(ctx, "collapsed_slice_dims", ())
    index_map = int_list(ctx, "start_index_map")
    slice_sizes = int_list(ctx, "slice_sizes")
    obd = _check_batching(ctx, x, indices, ivd, expanded, "operand_batching_dims", "start_indices_batching_dims",
                          index_map, "start_index_map", collapsed, "collapsed_slice_dims")
    out_rank = len(offset_dims) + len(expanded) - 1
    check_dims_in_range(ctx, offset_dims, out_rank, "offset_dims", increasing=True)
    if len(slice_sizes) != x.rank:
        raise fail(ctx, f"slice_sizes={list(slice_sizes)} must have one size per operand dimension ({x.rank})")
    for i, (s, n) in enumerate(zip(slice_sizes, x.dims)):
        if not 0 <= s <= n:
            raise fail(ctx, f"slice size {s} of dimension {i} is out of range for size {n}")
    for d in (*collapsed, *obd):
        if slice_sizes[d] > 1:
            raise fail(ctx, f"dimension {d} is collapsed or a batching dim, so its slice size must be 0 or 1, "
                            f"got {slice_sizes[d]}")
    if len(offset_dims) + len(collapsed) + len(obd) != x.rank:
        raise fail(ctx, f"offset_dims ({len(offset_dims)}) + collapsed_slice_dims ({len(collapsed)}) + "
                        f"operand_batching_dims ({len(obd)}) must cover the operand's rank {x.rank}")
    check = ctx.attr("index_check", None)
    if check is not None:
        if not isinstance(check, IndexCheck):
            raise fail(ctx, f"index_check must be an IndexCheck, got {check}")
        problem = structure_problem(check, indices.rank, ivd, index_map)
        if problem:
            raise fail(ctx, problem)
    window = iter([s for d, s in enumerate(slice_sizes) if d not in collapsed and d not in obd])
    batch = iter([n for d, n in enumerate(expanded) if d != ivd])
    return array(x.dtype, [next(window) if i in offset_dims else next(batch) for i in range(out_rank)])


@shape_rule(O.SCATTER)
def scatter(ctx: ShapeContext) -> ShapeLike:
    count = len(ctx.operands)
    if count < 3 or count % 2 == 0:
        raise fail(ctx, f"takes N inputs, the indices and N updates (an odd count of at least 3), got {count}")
    n = (count - 1) // 2
    inputs = [operand(ctx, i, f"input {i}") for i in range(n)]
    indices = operand(ctx, n, "the scatter indices")
    updates = [operand(ctx, n + 1 + i, f"update {i}") for i in range(n)]
    expect_same_dims(ctx, inputs, "inputs")
    expect_same_dims(ctx, updates, "updates")
    for i, (x, u) in enumerate(zip(inputs, updates)):
        if x.dtype != u.dtype:
            raise fail(ctx, f"update {i} {short(u)} must have the element type of input {i} {short(x)}")
    x, upd = inputs[0], updates[0]
    ivd, expanded = _expanded_indices(ctx, indices)
    window_dims = int_list(ctx, "update_window_dims")
    inserted = int_list(ctx, "inserted_window_dims", ())
    index_map = int_list(ctx, "scatter_dims_to_operand_dims")
    ibd = _check_batching(ctx, x, indices, ivd, expanded, "input_batching_dims", "scatter_indices_batching_dims",
                          index_map, "scatter_dims_to_operand_dims", inserted, "inserted_window_dims")
    check_dims_in_range(ctx, window_dims, upd.rank, "update_window_dims", increasing=True)
    if len(window_dims) + len(inserted) + len(ibd) != x.rank:
        raise fail(ctx, f"update_window_dims ({len(window_dims)}) + inserted_window_dims ({len(inserted)}) + "
                        f"input_batching_dims ({len(ibd)}) must cover the operand's rank {x.rank}")
    want_rank = len(window_dims) + len(expanded) - 1
    if upd.rank != want_rank:
        raise fail(ctx, f"updates {short(upd)} must have rank {want_rank} "
                        f"(update_window_dims plus the scatter batch dims)")
    operand_window = [d for d in range(x.rank) if d not in inserted and d not in ibd]
    for wd, od in zip(window_dims, operand_window):
        if upd.dims[wd] > x.dims[od]:
            raise fail(ctx, f"update window dim {wd} has size {upd.dims[wd]}, larger than operand dim {od} "
                            f"({x.dims[od]})")
    update_batch = [upd.dims[d] for d in range(upd.rank) if d not in window_dims]
    index_batch = [s for d, s in enumerate(expanded) if d != ivd]
    if update_batch != index_batch:
        raise fail(ctx, f"update scatter dims {update_batch} must match the indices' batch dims {index_batch}")
    check_combiner(ctx, "to_apply", [i.dtype for i in inputs])
    check = ctx.attr("index_check", None)
    if check is not None:
        if not isinstance(check, IndexCheck):
            raise fail(ctx, f"index_check must be an IndexCheck, got {check}")
        problem = scatter_structure_problem(check, x.dims, indices.dims, upd.dims, ctx.attr)
        if problem:
            raise fail(ctx, problem)
    results = [array(i.dtype, i.dims) for i in inputs]
    return results[0] if n == 1 else TupleShape(tuple(results))
