"""Einsum (one or two operands) built from diagonal masks, reduces, one dot and transposes.

Labels are letters; ``...`` stands for broadcast dims, aligned from the right
and broadcast NumPy-style between the operands (the output must then hold
``...`` too, as TF requires). A label repeated in an operand takes its
diagonal (mask the off-diagonal to zero, then sum one copy away); a label
repeated in the output places values on a diagonal. Labels of one operand
that appear nowhere else are summed first; the rest become the dot's batch
(in both operands and the output), contracting (in both, not the output) and
free dims, and a final transpose gives the output order.
"""

from __future__ import annotations

from typing import Sequence

from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import iota
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS
from hlo.opcodes import Opcode

P = PrimitiveType
ELLIPSIS = "..."


def _parse_term(ctx: LoweringContext, term: str) -> list[str]:
    """``"a...b"`` -> ``["a", "...", "b"]``."""
    if term.count(ELLIPSIS) > 1 or term.replace(ELLIPSIS, "").count("."):
        raise ctx.error(f"subscripts {term!r} hold more than one ellipsis or a stray '.'")
    out, rest = [], term
    while rest:
        if rest.startswith(ELLIPSIS):
            out.append(ELLIPSIS)
            rest = rest[3:]
        elif rest[0].isascii() and rest[0].isalpha():
            out.append(rest[0])
            rest = rest[1:]
        else:
            raise ctx.error(f"invalid character {rest[0]!r} in einsum subscripts {term!r}")
    return out


def _expand(ctx: LoweringContext, terms: list[list[str]], ranks: list[int]) -> tuple[list[list[str]], int]:
    """Replace ``...`` with labels ``.0``, ``.1``, ... aligned from the right; returns the ellipsis rank."""
    widths = []
    for term, rank in zip(terms, ranks):
        named = len([t for t in term if t != ELLIPSIS])
        width = rank - named if ELLIPSIS in term else 0
        if width < 0 or (ELLIPSIS not in term and rank != named):
            raise ctx.error(f"expected an input of rank {named} for subscripts {''.join(term)!r}, got rank {rank}")
        widths.append(width)
    full = max(widths, default=0)
    out = []
    for term, width in zip(terms, widths):
        labels = []
        for t in term:
            labels += [f".{full - width + j}" for j in range(width)] if t == ELLIPSIS else [t]
        out.append(labels)
    return out, full


def _label_sizes(ctx: LoweringContext, labels: list[list[str]]) -> dict[str, int]:
    """Each label's size; named labels must agree, ellipsis labels broadcast (1 stretches)."""
    seen: dict[str, set[int]] = {}
    for v, ls in zip(ctx.inputs, labels):
        for l, n in zip(ls, ctx.dims(v)):
            seen.setdefault(l, set()).add(n)
    sizes = {}
    for l, ns in seen.items():
        wide = ns - {1} if l.startswith(".") else ns
        if len(wide) > 1:
            what = "a broadcast (...) dimension" if l.startswith(".") else f"label {l!r}"
            raise ctx.error(f"{what} has incompatible sizes {sorted(ns)} in the operands")
        sizes[l] = wide.pop() if wide else 1
    return sizes


def _diagonal(ctx: LoweringContext, x: Value, labels: list[str]) -> tuple[Value, list[str]]:
    """Take the diagonal of every repeated label: keep entries where the copies agree, sum one copy away."""
    while len(set(labels)) != len(labels):
        q = next(i for i, l in enumerate(labels) if l in labels[:i])
        p = labels.index(labels[q])
        dims = ctx.dims(x)
        same = ctx.compare(iota(ctx, P.S32, dims, p), iota(ctx, P.S32, dims, q), "EQ")
        x = ctx.reduce(ctx.select(same, x, ctx.full(0, x)), [q], Opcode.ADD, 0)
        labels = labels[:q] + labels[q + 1:]
    return x, labels


def _sum_away(ctx: LoweringContext, x: Value, labels: list[str], keep: set[str]) -> tuple[Value, list[str]]:
    drop = [i for i, l in enumerate(labels) if l not in keep]
    if drop:
        x = ctx.reduce(x, drop, Opcode.ADD, 0)
    return x, [l for l in labels if l in keep]


def _place_diagonals(ctx: LoweringContext, x: Value, labels: list[str], out: list[str]) -> Value:
    """``x`` has the unique labels of ``out`` in first-occurrence order; give repeated labels their copies,
    zero off the diagonal."""
    dims = dict(zip(labels, ctx.dims(x)))
    out_dims = [dims[l] for l in out]
    first = [out.index(l) for l in out]
    wide = ctx.broadcast_in_dim(x, out_dims, [i for i in range(len(out)) if first[i] == i])
    for q, p in enumerate(first):
        if p != q:
            same = ctx.compare(iota(ctx, P.S32, out_dims, p), iota(ctx, P.S32, out_dims, q), "EQ")
            wide = ctx.select(same, wide, ctx.full(0, wide))
    return wide


@register_lowering("Einsum", dtypes=FLOATS | {P.S32, P.S64})
def einsum(ctx: LoweringContext) -> Value:
    equation = ctx.attr_str("equation")
    if equation.count("->") != 1:
        raise ctx.error(f"expecting exactly one '->' in einsum equation: {equation}")
    lhs, rhs = equation.split("->")
    terms = [_parse_term(ctx, t) for t in lhs.split(",")]
    if len(terms) != len(ctx.inputs) or len(terms) not in (1, 2):
        raise ctx.error(f"equation {equation!r} has {len(terms)} operand(s) but the node has {len(ctx.inputs)} "
                        "(1 or 2 supported)")
    out_term = _parse_term(ctx, rhs)
    labels, width = _expand(ctx, terms, [len(ctx.dims(v)) for v in ctx.inputs])
    out = []
    for t in out_term:
        out += [f".{j}" for j in range(width)] if t == ELLIPSIS else [t]
    if width and ELLIPSIS not in out_term:
        raise ctx.error(f"output contains {width} broadcasting dimension(s) but no ellipsis (...) was found "
                        "in the output subscripts")
    sizes = _label_sizes(ctx, labels)
    for l in out:
        if l not in sizes:
            raise ctx.error(f"output label {l!r} does not appear in any input")
    values = []
    for k, (v, ls) in enumerate(zip(ctx.inputs, labels)):
        v = ctx.broadcast_to(v, [sizes[l] for l in ls])  # size-1 ellipsis dims up to their common size
        v, ls = _diagonal(ctx, v, ls)
        v, ls = _sum_away(ctx, v, ls, set(out).union(*(labels[j] for j in range(len(labels)) if j != k)))
        values.append((v, ls))
    unique_out = list(dict.fromkeys(out))
    if len(values) == 1:
        x, ls = values[0]
    else:
        x, ls = _dot(ctx, values, set(unique_out))
    perm = [ls.index(l) for l in unique_out]
    if perm != list(range(len(perm))):
        x = ctx.b.transpose(x, dimensions=tuple(perm))
    if len(unique_out) != len(out):
        x = _place_diagonals(ctx, x, unique_out, out)
    return x


def _dot(ctx: LoweringContext, values: Sequence[tuple[Value, list[str]]], out: set[str]) -> tuple[Value, list[str]]:
    (a, la), (b, lb) = values
    batch = [l for l in la if l in lb and l in out]
    contract = [l for l in la if l in lb and l not in out]
    result = ctx.b.dot(a, b, lhs_batch_dims=tuple(la.index(l) for l in batch),
                       rhs_batch_dims=tuple(lb.index(l) for l in batch),
                       lhs_contracting_dims=tuple(la.index(l) for l in contract),
                       rhs_contracting_dims=tuple(lb.index(l) for l in contract))
    labels = batch + [l for l in la if l not in lb] + [l for l in lb if l not in la]
    return result, labels
