"""Indexing: GatherV2, GatherNd, ScatterNd, TensorScatterUpdate/Add/Sub/Max/Min, OneHot.

Gathers and scatters become one HLO gather/scatter with XLA's dimension
numbers (GatherV2's ``batch_dims`` as operand/start-index batching dims).
TF's CPU kernels reject out-of-range indices at run time: gathers and scatters
carry TF's check (``index_check=``, ``hlo/index_check.py``), so a compiled gather
or scatter raises TF's InvalidArgumentError where TF does (also for the shapes
TF's scatter kernels refuse whatever the indices hold, e.g. index rows into an
empty output). ``bad_indices_policy``: ``IGNORE`` on a scatter skips bad rows,
which is HLO's own scatter (no check); GatherNd's ``IGNORE`` (zeros for bad
rows) is refused.
Scatters combine duplicates in index order (ScatterNd adds, pred ORs).
"""

from __future__ import annotations

from math import prod

from hlo.attributes import IndexCheck
from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.index_check import scatter_shape_problem
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import combiner, iota
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import ALL, NUMERIC

P = PrimitiveType


@register_lowering("GatherV2", dtypes=ALL, type_attrs=("Tparams",), const_inputs=(2,))
def gather_v2(ctx: LoweringContext) -> Value:
    """``out = params[:axis] + indices[batch_dims:] + params[axis+1:]`` dims; the first ``batch_dims`` dims of
    params and indices are matched pairwise."""
    params, indices = ctx.inputs[:2]
    pd, idims = ctx.dims(params), ctx.dims(indices)
    axes = ctx.const_ints(2)
    if len(axes) != 1:
        raise ctx.error(f"axis must be a scalar, got {axes}")
    batch = ctx.attr_int("batch_dims", 0)
    batch = batch + len(idims) if batch < 0 else batch
    if not 0 <= batch <= len(idims):
        raise ctx.error(f"batch_dims {ctx.attr_int('batch_dims', 0)} is out of range for indices of rank {len(idims)}")
    axis = ctx.normalize_axis(axes[0], len(pd))
    if not len(pd):
        raise ctx.error("params must be at least 1 dimensional")
    if batch > axis:
        raise ctx.error(f"batch_dims ({batch}) must be less than or equal to axis ({axis})")
    for d in range(batch):
        if pd[d] != idims[d]:
            raise ctx.error(f"params.shape[{d}] = {pd[d]} must equal indices.shape[{d}] = {idims[d]} "
                            f"(batch_dims = {batch})")
    extra = len(idims) - batch
    sizes = [min(1, n) if d == axis or d < batch else n for d, n in enumerate(pd)]  # 0 for empty dims
    offset = list(range(batch, axis)) + list(range(axis + extra, len(pd) - 1 + extra))
    return ctx.b.gather(params, indices, offset_dims=tuple(offset), collapsed_slice_dims=(axis,),
                        start_index_map=(axis,), operand_batching_dims=tuple(range(batch)),
                        start_indices_batching_dims=tuple(range(batch)), index_vector_dim=len(idims),
                        slice_sizes=tuple(sizes), index_check=IndexCheck.TF_GATHER)


@register_lowering("GatherNd", dtypes=ALL, type_attrs=("Tparams",))
def gather_nd(ctx: LoweringContext) -> Value:
    """``out[b...] = params[indices[b..., :]]``; dims ``indices[:-1] + params[q:]`` with q the index depth."""
    if _bad_indices_policy(ctx) == "IGNORE":
        raise ctx.error("bad_indices_policy=IGNORE (zeros for out-of-range rows) is not supported")
    params, indices = ctx.inputs
    pd, idims = ctx.dims(params), ctx.dims(indices)
    if not idims:
        raise ctx.error("indices must be at least a vector")
    q = idims[-1]
    if q > len(pd):
        raise ctx.error(f"index innermost dimension length {q} must be <= params rank {len(pd)}")
    lead = len(idims) - 1
    return ctx.b.gather(params, indices, offset_dims=tuple(range(lead, lead + len(pd) - q)),
                        collapsed_slice_dims=tuple(range(q)), start_index_map=tuple(range(q)),
                        index_vector_dim=lead, slice_sizes=tuple(min(1, n) for n in pd[:q]) + tuple(pd[q:]),
                        index_check=IndexCheck.TF_GATHER_ND)


def _bad_indices_policy(ctx: LoweringContext) -> str:
    """TF's ``bad_indices_policy``: ``ERROR`` (also "" and ``DEFAULT`` on CPU) or ``IGNORE``."""
    policy = ctx.attr_str("bad_indices_policy", "") or "ERROR"
    if policy not in ("DEFAULT", "ERROR", "IGNORE"):
        raise ctx.error(f"unknown bad_indices_policy {policy!r}")
    return "ERROR" if policy == "DEFAULT" else policy


def _scatter_nd(ctx: LoweringContext, operand: Value, indices: Value, updates: Value, kind: str,
                check: IndexCheck) -> Value:
    od, idims, ud = ctx.dims(operand), ctx.dims(indices), ctx.dims(updates)
    if 0 in od and 0 in idims and 0 in ud:
        return operand  # nothing to scatter into an empty result (TF checks nothing either)
    if len(idims) < 2:
        raise ctx.error(f"indices must have rank at least 2 (TF rejects rank-{len(idims)} scatter indices)")
    q, lead = idims[-1], len(idims) - 1
    want = list(idims[:-1]) + list(od[q:])
    if q > len(od) or list(ud) != want:
        raise ctx.error(f"updates {list(ud)} must have dims indices.shape[:-1] + shape[{q}:] = {want} "
                        f"for shape {list(od)}")
    checked = {"index_check": check}
    if _bad_indices_policy(ctx) == "IGNORE":  # TF skips bad rows as HLO's scatter does, but checks shapes
        problem = scatter_shape_problem(check, od, idims, prod(ud), ctx.node.name)
        if problem:
            raise ctx.error(f"bad_indices_policy=IGNORE with shapes TF refuses at run time: {problem}")
        checked = {}
    return ctx.b.scatter(operand, indices, updates, update_window_dims=tuple(range(lead, len(ud))),
                         inserted_window_dims=tuple(range(q)), scatter_dims_to_operand_dims=tuple(range(q)),
                         index_vector_dim=lead, to_apply=combiner(ctx, kind, ctx.dtype(operand)), **checked)


@register_lowering("ScatterNd", dtypes=ALL, const_inputs=(2,))
def scatter_nd(ctx: LoweringContext) -> Value:
    indices, updates = ctx.inputs[:2]
    dims = ctx.const_ints(2)
    if any(d < 0 for d in dims):
        raise ctx.error(f"shape {dims} must be non-negative")
    zeros = ctx.broadcast_in_dim(ctx.scalar(0, ctx.dtype(updates)), dims, ())
    return _scatter_nd(ctx, zeros, indices, updates, "add", IndexCheck.TF_SCATTER_ND)


# TensorScatter* op -> (combiner kind, dtypes)
_TENSOR_SCATTER = {
    "TensorScatterUpdate": ("replace", ALL),
    "TensorScatterAdd": ("add", NUMERIC),
    "TensorScatterSub": ("sub", NUMERIC),
    "TensorScatterMax": ("max", NUMERIC),
    "TensorScatterMin": ("min", NUMERIC),
}


def _tensor_scatter(kind: str) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        operand, indices, updates = ctx.inputs
        return _scatter_nd(ctx, operand, indices, updates, kind, IndexCheck.TF_TENSOR_SCATTER)
    return lower


for _op, (_kind, _dtypes) in _TENSOR_SCATTER.items():
    register_lowering(_op, dtypes=_dtypes)(_tensor_scatter(_kind))


@register_lowering("OneHot", dtypes=ALL, const_inputs=(1,))
def one_hot(ctx: LoweringContext) -> Value:
    """``on`` where the index equals the position along ``axis``; out-of-range (and negative) indices give
    a row of ``off``."""
    indices, _, on, off = ctx.inputs
    idims = list(ctx.dims(indices))
    (depth,) = ctx.const_ints(1) or [-1]
    if depth < 0:
        raise ctx.error(f"depth must be a non-negative scalar, got {ctx.const_ints(1)}")
    for name, v in (("on_value", on), ("off_value", off)):
        if ctx.dims(v):
            raise ctx.error(f"{name} must be a scalar, got dims {list(ctx.dims(v))}")
    axis = ctx.attr_int("axis", -1)
    if axis < -1 or axis > len(idims):
        raise ctx.error(f"expected axis to be -1 or between [0, {len(idims)}], but got {axis}")
    axis = len(idims) if axis == -1 else axis
    out = idims[:axis] + [depth] + idims[axis:]
    wide = ctx.convert(indices, P.S64)
    spread = ctx.broadcast_in_dim(wide, out, [d for d in range(len(out)) if d != axis])
    hot = ctx.compare(spread, iota(ctx, P.S64, out, axis), "EQ")
    return ctx.select(hot, on, off)
