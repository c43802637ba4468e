"""Elemental rules that loop over a window or an index vector: reduce-window, convolution, gather,
and bitcast-convert (a reinterpretation of one element's bits).

These are the straightforward forms (one output element at a time); fast
dense convolution and matmul paths live in their own kernels.
"""

from __future__ import annotations

import itertools
import math

from backends.codegen.elemental import ElementalEmitter, Value, array_shape, elemental, leaf_shapes
from backends.codegen.elemental_data import _loop_accumulate, reinterpret_bits
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import Index
from hlo.attributes import WindowDim
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import TupleShape


def _window_position(out: str, k: str, d: WindowDim) -> tuple[str, list[str]]:
    """Input position for output ``out`` and window offset ``k`` in one dim, and validity conditions."""
    kk = f"({d.size - 1} - {k})" if d.reversal else k
    pos = f"({out} * {d.stride} + {kk} * {d.rhs_dilate} - {d.pad_low})"
    conds = [f"{pos} >= 0"]
    if d.lhs_dilate != 1:
        conds.append(f"{pos} % {d.lhs_dilate} == 0")
        pos = f"({pos} / {d.lhs_dilate})"
    return pos, conds


UNROLL_WINDOW = 16  # windows of at most this many positions are emitted unrolled (pooling's 2x2, 3x3)
# Reducers that may run on any element (no trap, no side effect): a padded position of an unrolled window
# then reads a clamped element and keeps the accumulator by a select, with no branch in the loop.
_BRANCHLESS = frozenset({Opcode.PARAMETER, Opcode.CONSTANT, Opcode.MAXIMUM, Opcode.MINIMUM, Opcode.ADD,
                         Opcode.MULTIPLY, Opcode.COMPARE, Opcode.SELECT, Opcode.AND, Opcode.OR, Opcode.NOT,
                         Opcode.TUPLE})


def _bounds(pos: str, lo: int, hi: int, size: int) -> tuple[list[str], str] | None:
    """For ``pos`` ranging over [lo, hi] (as the output index runs) in a dim of ``size``: the conditions
    that it is inside that can fail, and the position clamped inside; None when it never is inside."""
    if hi < 0 or lo >= size or size == 0:
        return None
    conds = ([f"{pos} >= 0"] if lo < 0 else []) + ([f"{pos} < {size}"] if hi >= size else [])
    clamped = pos if hi < size else f"({pos} < {size - 1} ? {pos} : {size - 1})"
    clamped = clamped if lo >= 0 else f"({pos} < 0 ? 0 : {clamped})"
    return conds, clamped


@elemental(Opcode.REDUCE_WINDOW)
def _reduce_window(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    """Small windows (``UNROLL_WINDOW``) are unrolled, each position's offsets constants and only the
    bound checks that can fail (and those a select, for a ``_BRANCHLESS`` reducer): an NHWC pooling's loop
    over the channels then vectorizes. Positions are combined in the same (row-major) order either way."""
    n = len(inst.operands) // 2
    src = em.operand_shape(inst, 0)
    window = inst.attr("window").dims
    shapes = leaf_shapes(inst)
    out_dims = shapes[0].dims
    reducer = inst.attr("to_apply").name
    accs = [em.var(em.dialect.compute(s.dtype), em.operand(inst, n + k, ()), "acc") for k, s in enumerate(shapes)]

    def combine(positions: list[str], conds: list[str], select: bool = False) -> None:
        cond = " && ".join(f"({c})" for c in conds)
        with em.buf.block(f"if ({cond})" if conds and not select else ""):
            em.push()
            vals = [em.operand(inst, k, tuple(positions)) for k in range(n)]
            new = em.call_scalar(reducer, accs + vals)
            new = new if isinstance(new, tuple) else (new,)
            for a, v in zip(accs, new):
                em.buf.line(f"{a} = ({cond}) ? {v} : {a};" if conds and select else f"{a} = {v};")
            em.pop()

    if 0 < math.prod(d.size for d in window) <= UNROLL_WINDOW and all(d.lhs_dilate == 1 for d in window):
        select = all(i.opcode in _BRANCHLESS for i in em.module.computation(reducer).instructions)
        for ks in itertools.product(*(range(d.size) for d in window)):
            positions, conds = [], []
            for o, k, d, size, out in zip(idx, ks, window, src.dims, out_dims):
                kk = d.size - 1 - k if d.reversal else k
                shift = kk * d.rhs_dilate - d.pad_low
                scaled = o if d.stride == 1 else f"{o} * {d.stride}"
                pos = f"({scaled} {'+' if shift > 0 else '-'} {abs(shift)})" if shift else f"({scaled})"
                inside = _bounds(pos, shift, (out - 1) * d.stride + shift, size)
                if inside is None:
                    break
                conds += inside[0]
                positions.append(inside[1] if select else pos)
            else:
                combine(positions, conds, select)
        return tuple(accs) if isinstance(inst.shape, TupleShape) else accs[0]
    kvars = [em.names.fresh("w") for _ in window]
    positions, conds = [], []
    for o, kv, d, size in zip(idx, kvars, window, src.dims):
        pos, c = _window_position(o, kv, d)
        positions.append(pos)
        conds += c + [f"{pos} < {size}"]
    _loop_accumulate(em, [(kv, d.size) for kv, d in zip(kvars, window)], lambda: combine(positions, conds))
    return tuple(accs) if isinstance(inst.shape, TupleShape) else accs[0]


@elemental(Opcode.CONVOLUTION)
def _convolution(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    lhs, rhs = em.operand_shape(inst, 0), em.operand_shape(inst, 1)
    dl = inst.attr("dim_labels")
    window = inst.attr("window").dims
    groups = inst.attr("feature_group_count", 1)
    bgroups = inst.attr("batch_group_count", 1)
    out_features = array_shape(inst).dims[dl.output_feature]
    in_per_group = rhs.dims[dl.kernel_input_feature]
    b, f = idx[dl.output_batch], idx[dl.output_feature]
    out_spatial = [idx[d] for d in dl.output_spatial]
    if groups > 1:
        group = em.tmp("int64_t", f"{f} / {out_features // groups}", "g")
        in_feature_base = f"{group} * {in_per_group}"
    else:
        in_feature_base = "0"
    batch = b
    if bgroups > 1:
        bgroup = em.tmp("int64_t", f"{f} / {out_features // bgroups}", "g")
        batch = f"({bgroup} * {array_shape(inst).dims[dl.output_batch]} + {b})"
    c = em.names.fresh("c")
    kvars = [em.names.fresh("w") for _ in window]
    acc_type = em.dialect.compute(array_shape(inst).dtype)
    acc = em.var(acc_type, "0")
    lhs_idx: list[str] = ["0"] * lhs.rank
    rhs_idx: list[str] = ["0"] * rhs.rank
    lhs_idx[dl.input_batch] = batch
    lhs_idx[dl.input_feature] = f"({in_feature_base} + {c})" if in_feature_base != "0" else c
    rhs_idx[dl.kernel_input_feature] = c
    rhs_idx[dl.kernel_output_feature] = f
    conds = []
    for s, (o, k, d) in enumerate(zip(out_spatial, kvars, window)):
        pos, cs = _window_position(o, k, d)
        lhs_idx[dl.input_spatial[s]] = pos
        rhs_idx[dl.kernel_spatial[s]] = k
        conds += cs + [f"{pos} < {lhs.dims[dl.input_spatial[s]]}"]

    def body() -> None:
        with em.buf.block(f"if ({' && '.join(f'({x})' for x in conds) or '1'})"):
            em.push()
            a = em.operand(inst, 0, tuple(lhs_idx))
            w = em.operand(inst, 1, tuple(rhs_idx))
            em.buf.line(f"{acc} = ({acc_type})({acc} + ({acc_type})({a}) * ({acc_type})({w}));")
            em.pop()

    _loop_accumulate(em, [(k, d.size) for k, d in zip(kvars, window)] + [(c, in_per_group)], body)
    return em.result(inst, acc)


@elemental(Opcode.GATHER)
def _gather(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    """XLA's gather: starts clamped into the operand, zeros from an empty operand (nothing is read). A
    gather with ``index_check=`` is emitted only where the caller checked its indices first
    (``em.index_checked``, see backends/cpu/index_check.py)."""
    operand, indices = em.operand_shape(inst, 0), em.operand_shape(inst, 1)
    check = inst.attr("index_check", None)
    if check is not None and inst.name not in em.index_checked:
        raise CodegenUnsupported(f"%{inst.name}: gather with index_check={check.value}: this kernel does not "
                                 f"check the indices first (TF raises InvalidArgumentError where XLA's clamp "
                                 f"would answer)")
    if operand.num_elements == 0:
        return em.dialect.literal(0, array_shape(inst).dtype)
    offset_dims = inst.attr("offset_dims", ())
    collapsed = inst.attr("collapsed_slice_dims", ())
    start_map = inst.attr("start_index_map", ())
    ivd = inst.attr("index_vector_dim")
    sizes = inst.attr("slice_sizes")
    op_batching = inst.attr("operand_batching_dims", ())
    idx_batching = inst.attr("start_indices_batching_dims", ())
    batch_idx = [i for d, i in enumerate(idx) if d not in offset_dims]  # indices' dims without ivd
    offsets = [idx[d] for d in offset_dims]
    window_dims = [d for d in range(operand.rank) if d not in collapsed and d not in op_batching]

    def index_at(vector_pos: str | None) -> tuple[str, ...]:
        it = iter(batch_idx)
        full: list[str] = []
        for d in range(indices.rank):  # (ivd is a dim of indices only when vector_pos is given)
            full.append(vector_pos if d == ivd and vector_pos is not None else next(it))
        return tuple(full)

    start = ["0"] * operand.rank
    for k, d in enumerate(start_map):
        raw = em.operand(inst, 1, index_at(str(k)) if ivd < indices.rank else index_at(None))
        hi = operand.dims[d] - sizes[d]
        start[d] = em.tmp("int64_t", f"((int64_t)({raw}) < 0 ? 0 : ((int64_t)({raw}) > {hi} ? {hi} : "
                                     f"(int64_t)({raw})))", "s")
    batch_dims_of_indices = [d for d in range(indices.rank) if d != ivd]
    for d, idim in zip(op_batching, idx_batching):
        start[d] = batch_idx[batch_dims_of_indices.index(idim)]
    src = list(start)
    if len(offsets) != len(window_dims):
        raise CodegenUnsupported(f"%{inst.name}: gather offset dims do not match its window dims")
    for d, o in zip(window_dims, offsets):
        src[d] = f"({start[d]} + {o})" if start[d] != "0" else o
    return em.operand(inst, 0, tuple(src))


@elemental(Opcode.BITCAST_CONVERT)
def _bitcast_convert(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    src_t = em.operand_shape(inst, 0).dtype
    return reinterpret_bits(em, em.operand(inst, 0, idx), src_t, array_shape(inst).dtype, inst.name)
