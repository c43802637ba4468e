"""Elemental rules for data movement and small loops: index remapping, reductions, dot.

Data-movement ops never touch memory here: they rewrite the index and ask
their operand for the element there (broadcast drops dims, transpose permutes,
slice offsets, pad and concatenate select among reads at clamped indices). Reduce, dot
and reduce-window open an inner loop over their reduced dims with
accumulators, inlining the reducer computation.
"""

from __future__ import annotations

from typing import Callable, Sequence

from backends.codegen.buffer import close_loops, open_loops
from backends.codegen.elemental import ElementalEmitter, SplitReduction, Value, array_shape, elemental, leaf_shapes
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import Index, delinearize, linear_index
from hlo.dtypes import PrimitiveType
from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape, TupleShape


@elemental(Opcode.CONSTANT)
def _constant(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    shape = inst.shape
    if not isinstance(shape, Shape):
        raise CodegenUnsupported(f"%{inst.name}: tuple constants are not supported")
    if inst.literal is None:
        raise CodegenUnsupported(f"%{inst.name}: constant without a literal")
    arr = inst.literal.to_numpy()
    if shape.num_elements == 1:
        return em.dialect.literal(arr.reshape(-1)[0], shape.dtype)
    ref = em.constant_ref(inst)
    return em.dialect.load(shape.dtype, f"{ref}[{linear_index(Shape(shape.dtype, shape.dims), idx)}]")


@elemental(Opcode.IOTA)
def _iota(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    return em.result(inst, f"({em.dialect.compute(array_shape(inst).dtype)})({idx[inst.attr('iota_dimension')]})")


@elemental(Opcode.BROADCAST)
def _broadcast(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    dims = inst.attr("dimensions")
    return em.operand(inst, 0, tuple(idx[d] for d in dims))


@elemental(Opcode.RESHAPE, Opcode.BITCAST)
def _reshape(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    src = em.operand_shape(inst, 0)
    if src.num_elements == 1:
        value = em.operand(inst, 0, ("0",) * src.rank)
    elif inst.opcode is Opcode.BITCAST:  # same bytes: map through both layouts
        value = em.operand(inst, 0, delinearize(linear_index(array_shape(inst), idx), src))
    else:
        offset = em.tmp("int64_t", linear_index(Shape(array_shape(inst).dtype, array_shape(inst).dims), idx), "o")
        value = em.operand(inst, 0, delinearize(offset, Shape(src.dtype, src.dims)))
    if src.dtype != array_shape(inst).dtype:  # a bitcast that reinterprets each element (equal widths)
        return reinterpret_bits(em, value, src.dtype, array_shape(inst).dtype, inst.name)
    return value


@elemental(Opcode.TRANSPOSE)
def _transpose(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    perm = inst.attr("dimensions")
    src: list[str] = [""] * len(perm)  # (every dim is set: perm is a permutation)
    for out_dim, in_dim in enumerate(perm):
        src[in_dim] = idx[out_dim]
    return em.operand(inst, 0, tuple(src))


@elemental(Opcode.SLICE)
def _slice(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    spec = inst.attr("slice")
    src = []
    for i, d in zip(idx, spec):
        term = i if d.stride == 1 else f"{i} * {d.stride}"
        src.append(term if d.start == 0 else f"({d.start} + {term})")
    return em.operand(inst, 0, tuple(src))


@elemental(Opcode.REVERSE)
def _reverse(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    dims = set(inst.attr("dimensions"))
    n = array_shape(inst).dims
    return em.operand(inst, 0, tuple(f"({n[d] - 1} - {i})" if d in dims else i for d, i in enumerate(idx)))


@elemental(Opcode.PAD)
def _pad(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    """The operand's element at the source index clamped into the operand, or the padding value, by a
    select: no load inside a branch (GCC 12.2 vectorizes ``if (inside) a = x[..];`` in a loop nest with
    an inner dim of 2 into masked loads that zeroed a row of f64[3,2] padded by [[1,2],[0,0]]; found by
    tests/fuzz seed 0 graph 9794). An empty operand has nothing to read: the result is the padding."""
    cfg = inst.attr("padding")
    src_dims = em.operand_shape(inst, 0).dims
    pad_value = em.operand(inst, 1, ())
    if 0 in src_dims:
        return pad_value
    conds, src = [], []
    for i, d, n in zip(idx, cfg, src_dims):
        shifted = em.shared_index(f"({i} - ({d.low}))" if d.low else i)  # written 5 times: see shared_index
        if d.interior:
            conds.append(f"{shifted} % {d.interior + 1} == 0")
            shifted = em.shared_index(f"({shifted} / {d.interior + 1})")
        conds += [f"{shifted} >= 0", f"{shifted} < {n}"]
        src.append(f"({shifted} < 0 ? 0 : ({shifted} > {n - 1} ? {n - 1} : {shifted}))")
    inside = em.tmp("int", " && ".join(f"({c})" for c in conds) or "1", "in")
    v = em.operand(inst, 0, tuple(src))
    return em.tmp(em.ctype_of(inst), f"({inside} ? {v} : {pad_value})")


@elemental(Opcode.CONCATENATE)
def _concatenate(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    """Every non-empty operand's element at its index clamped into the operand, then one chosen by a
    select chain: no loads inside branches. GCC 12.2 miscompiles the branchy form (``if (i < 5) a =
    x[..]; else a = 1.0 / y[..];`` then min/max) in a vectorized loop nest whose inner dim is 3:
    the if-converted masked loads of the stride-3 group gave lanes of the second operand the clamp
    of the first (tests/test_cpu_backend_shapes.py, found by tests/fuzz)."""
    (axis,) = inst.attr("dimensions")
    parts, offset = [], 0
    for name in inst.operands:
        size = array_shape(em.comp[name]).dims[axis]
        if size:
            parts.append((name, offset, size))
        offset += size
    if not parts:
        return em.var(em.ctype_of(inst), "0")
    # every index written more than once is a name (``shared_index``): a nest of concatenates would
    # otherwise double its text at every level
    i = em.shared_index(idx[axis]) if len(parts) > 1 else idx[axis]
    values = []
    for k, (name, start, size) in enumerate(parts):
        local = em.shared_index(f"({i} - {start})") if start else i
        if k:
            local = f"({local} < 0 ? 0 : {local})"
        if k < len(parts) - 1:
            local = em.shared_index(local)
            local = f"({local} > {size - 1} ? {size - 1} : {local})"
        values.append(em.emit(name, tuple(local if d == axis else j for d, j in enumerate(idx))))
    expr = values[-1]
    for (_, start, size), v in zip(reversed(parts[:-1]), reversed(values[:-1])):
        expr = f"({i} < {start + size} ? {v} : {expr})"
    return em.tmp(em.ctype_of(inst), expr) if len(values) > 1 else values[0]


def _clamped_starts(em: ElementalEmitter, inst: HloInstruction, first: int, sizes: Sequence[int],
                    operand_dims: Sequence[int]) -> list[str]:
    starts = []
    for d, (size, n) in enumerate(zip(sizes, operand_dims)):
        s = em.operand(inst, first + d, ())
        starts.append(em.tmp("int64_t", f"((int64_t)({s}) < 0 ? 0 : ((int64_t)({s}) > {n - size} ? {n - size} "
                                        f": (int64_t)({s})))", "s"))
    return starts


@elemental(Opcode.DYNAMIC_SLICE)
def _dynamic_slice(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    src = em.operand_shape(inst, 0)
    if len(inst.operands) != 1 + src.rank:
        raise CodegenUnsupported(f"%{inst.name}: dynamic-slice with a start-index vector")
    starts = slice_starts(em, inst)
    return em.operand(inst, 0, tuple(f"({s} + {i})" for s, i in zip(starts, idx)))


@elemental(Opcode.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    upd = em.operand_shape(inst, 1)
    starts = _clamped_starts(em, inst, 2, upd.dims, array_shape(inst).dims)
    rel = [f"({i} - {s})" for i, s in zip(idx, starts)]
    inside = " && ".join(f"({r} >= 0 && {r} < {n})" for r, n in zip(rel, upd.dims)) or "1"
    value = em.var(em.ctype_of(inst), "0")
    with em.buf.block(f"if ({inside})"):
        em.push()
        em.buf.line(f"{value} = {em.operand(inst, 1, tuple(rel))};")
        em.pop()
    with em.buf.block("else"):
        em.push()
        em.buf.line(f"{value} = {em.operand(inst, 0, idx)};")
        em.pop()
    return value


def update_starts(em: ElementalEmitter, inst: HloInstruction) -> list[str]:
    """A dynamic-update-slice's start indices, clamped as XLA clamps them (the update lies inside)."""
    return _clamped_starts(em, inst, 2, em.operand_shape(inst, 1).dims, array_shape(inst).dims)


def slice_starts(em: ElementalEmitter, inst: HloInstruction) -> list[str]:
    """A dynamic-slice's start indices, clamped as XLA clamps them (the slice lies inside its operand)."""
    return _clamped_starts(em, inst, 1, array_shape(inst).dims, em.operand_shape(inst, 0).dims)


def update_element(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> tuple[tuple[str, ...], Value]:
    """A dynamic-update-slice written in place (its result buffer already holds its operand): where
    update element ``idx`` goes in the result and its value."""
    return tuple(f"({s} + {i})" for s, i in zip(update_starts(em, inst), idx)), em.operand(inst, 1, idx)


@elemental(Opcode.TUPLE)
def _tuple(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    return tuple(em.emit(o, idx) for o in inst.operands)


@elemental(Opcode.GET_TUPLE_ELEMENT)
def _gte(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    value = em.operand(inst, 0, idx)
    if not isinstance(value, tuple):
        raise CodegenUnsupported(f"%{inst.name}: get-tuple-element of a non-tuple value")
    return value[inst.attr("index")]


def _loop_accumulate(em: ElementalEmitter, bounds: list[tuple[str, int]], body: Callable[[], None],
                     simd: str | None = None, reduction: tuple[str, str, Opcode, str] | None = None) -> None:
    """Open nested ``for`` loops over ``bounds`` ((var, size) pairs) around ``body()``; ``simd`` is the
    dialect's reduction clause (``Dialect.reduction_clause``, e.g. ``reduction(+:acc3)``), put on the
    innermost loop. ``reduction`` ((acc, C type, reducer opcode, reducer computation) of a ``simd`` one):
    when the caller runs this element alone (``em.parallel_reduce``), the loops are offered to its splitter."""
    mark = em.names.counter
    with em.buf.capture() as inner:
        em.push()
        body()
        em.pop()
    line = em.dialect.simd_pragma(simd) if simd else None
    splitter = em.parallel_reduce if bounds else None
    if splitter is not None and reduction is not None:
        em.parallel_reduce = None  # one split per element
        acc, ctype, op, reducer = reduction
        if splitter(em, SplitReduction(tuple(bounds), inner, line, acc, ctype, op, reducer, mark)):
            return
    open_loops(em.buf, bounds[:-1])
    if line is not None and bounds:
        em.buf.line(line)
    open_loops(em.buf, bounds[-1:])
    em.buf.splice(inner)
    close_loops(em.buf, len(bounds))


@elemental(Opcode.REDUCE)
def _reduce(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    n = len(inst.operands) // 2
    src = em.operand_shape(inst, 0)
    dims = set(inst.attr("dimensions"))
    shapes = leaf_shapes(inst)
    accs = [em.var(em.dialect.compute(s.dtype), em.operand(inst, n + k, ()), "acc") for k, s in enumerate(shapes)]
    loop_vars = {d: em.names.fresh("r") for d in sorted(dims)}
    out_iter = iter(idx)
    full = tuple(loop_vars[d] if d in dims else next(out_iter) for d in range(src.rank))

    def body() -> None:
        vals = [em.operand(inst, k, full) for k in range(n)]
        new = em.call_scalar(inst.attr("to_apply").name, accs + vals)
        new = new if isinstance(new, tuple) else (new,)
        for a, v in zip(accs, new):
            em.buf.line(f"{a} = {v};")

    simd, reduction = None, None
    if len(accs) == 1:
        reducer = inst.attr("to_apply").name
        op = simple_reducer(em.module, reducer)
        ctype = em.dialect.compute(shapes[0].dtype)
        simd = em.dialect.reduction_clause(op, ctype, accs[0]) if op is not None else None
        reduction = (accs[0], ctype, op, reducer) if simd and op is not None else None
    _loop_accumulate(em, [(loop_vars[d], src.dims[d]) for d in sorted(dims)], body, simd, reduction)
    return tuple(accs) if isinstance(inst.shape, TupleShape) else accs[0]


def simple_reducer(module: HloModule, comp_name: str) -> Opcode | None:
    """The opcode of a reducer that is one binary op on its two parameters, else None."""
    comp = module.computation(comp_name)
    root = comp.root
    params = {p.name for p in comp.parameters}
    if len(comp.parameters) == 2 and len(root.operands) == 2 and set(root.operands) == params:
        return root.opcode
    return None


@elemental(Opcode.DOT)
def _dot(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    lhs, rhs = em.operand_shape(inst, 0), em.operand_shape(inst, 1)
    lb, lc = inst.attr("lhs_batch_dims", ()), inst.attr("lhs_contracting_dims", ())
    rb, rc = inst.attr("rhs_batch_dims", ()), inst.attr("rhs_contracting_dims", ())
    out = list(idx)
    batch = out[:len(lb)]
    lfree = [d for d in range(lhs.rank) if d not in lb and d not in lc]
    rfree = [d for d in range(rhs.rank) if d not in rb and d not in rc]
    lfree_idx = out[len(lb):len(lb) + len(lfree)]
    rfree_idx = out[len(lb) + len(lfree):]
    kvars = [em.names.fresh("k") for _ in lc]
    li: list[str] = [""] * lhs.rank  # (batch, free and contracting dims cover each operand)
    ri: list[str] = [""] * rhs.rank
    for d, v in zip(lb, batch):
        li[d] = v
    for d, v in zip(rb, batch):
        ri[d] = v
    for d, v in zip(lfree, lfree_idx):
        li[d] = v
    for d, v in zip(rfree, rfree_idx):
        ri[d] = v
    for ld, rd, k in zip(lc, rc, kvars):
        li[ld], ri[rd] = k, k
    t = array_shape(inst).dtype
    acc_type = "float" if em.dialect.compute(t) == "float" else em.dialect.compute(t)
    acc = em.var(acc_type, "0")

    def body() -> None:
        a, b = em.operand(inst, 0, tuple(li)), em.operand(inst, 1, tuple(ri))
        if t.is_pred:
            em.buf.line(f"{acc} = {acc} | ({a} & {b});")
        else:
            em.buf.line(f"{acc} = ({acc_type})({acc} + ({acc_type})({a}) * ({acc_type})({b}));")

    _loop_accumulate(em, [(k, lhs.dims[d]) for k, d in zip(kvars, lc)], body)
    return em.result(inst, acc)


@elemental(Opcode.MAP)
def _map(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    args = [em.operand(inst, k, idx) for k in range(len(inst.operands))]
    return em.call_scalar(inst.attr("to_apply").name, args)


@elemental(Opcode.CALL)
def _call(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    comp = em.module.computation(inst.attr("to_apply").name)
    if any(p.shape.rank if isinstance(p.shape, Shape) else 1 for p in comp.parameters) or not \
            isinstance(inst.shape, Shape) or array_shape(inst).rank:
        raise CodegenUnsupported(f"%{inst.name}: only scalar calls can be inlined into a loop")
    return em.call_scalar(comp.name, [em.operand(inst, k, ()) for k in range(len(inst.operands))])


@elemental(Opcode.FUSION)
def _nested_fusion(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    comp = em.module.computation(inst.attr("calls").name)
    return em.sub(comp, [_operand_param(em, inst, k) for k in range(len(inst.operands))]).emit(comp.root_name, idx)


def _operand_param(em: ElementalEmitter, inst: HloInstruction, k: int) -> Callable[[Index], str]:
    return lambda i: em.operand(inst, k, i)


@elemental(Opcode.SET_DIMENSION_SIZE, Opcode.OPTIMIZATION_BARRIER)
def _pass_through(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    """set-dimension-size only changes the dynamic size bound; the data is the operand's."""
    return em.operand(inst, 0, idx)


_BITS = {1: "uint8_t", 2: "uint16_t", 4: "uint32_t", 8: "uint64_t"}


def reinterpret_bits(em: ElementalEmitter, value: str, src: PrimitiveType, dst: PrimitiveType, name: str) -> str:
    """``value`` (compute type of ``src``) with its stored bits read as ``dst`` (same width)."""
    if src.byte_size != dst.byte_size or src.bit_width < 8:
        raise CodegenUnsupported(f"%{name}: bit reinterpretation between different widths")
    stored = em.tmp(em.dialect.storage(src), em.dialect.store(src, value), "bc")
    out = em.names.fresh("bc")
    em.buf.line(f"{em.dialect.storage(dst)} {out}; memcpy(&{out}, &{stored}, {dst.byte_size});")
    em.declared[out] = em.dialect.storage(dst)
    return em.tmp(em.dialect.compute(dst), em.dialect.load(dst, out))
