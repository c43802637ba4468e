"""Top-level kernels that sort: sort (any comparator, stable) and the TopK custom call.

The comparator computation becomes a ``static inline`` C function of 2N
scalars. Each row along the sort dimension is sorted as a permutation with a
bottom-up stable merge sort (the right element moves first only when the
comparator says it is strictly less), then every operand is gathered
through the permutation.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.cpu.codegen import Buf, ComputationEmitter, Value, leaves, top_level
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def comparator_function(em: ComputationEmitter, comp_name: str) -> str:
    """Emit ``static inline int cmp_N(a0, b0, a1, b1, ...)`` for a comparator computation (memoized)."""
    gen = em.gen
    cache = gen.__dict__.setdefault("_comparators", {})
    if comp_name in cache:
        return cache[comp_name]
    fname = f"cmp_{len(cache)}"
    comp = gen.module.computation(comp_name)
    args = [f"x{k}" for k in range(len(comp.parameters))]
    body = IndentedBuffer()
    sub = ElementalEmitter(gen.dialect, gen.module, comp, [(lambda _i, a=a: a) for a in args], body, gen.names,
                           gen.constant_ref)
    result = sub.emit(comp.root_name, ())
    params = ", ".join(f"{gen.dialect.compute(p.shape.dtype)} {a}" for p, a in zip(comp.parameters, args))
    text = IndentedBuffer()
    with text.block(f"{gen.dialect.inline_function} int {fname}({params})"):
        text.splice(body)
        text.line(f"return ({result}) != 0;")
    gen.globals.splice(text)
    cache[comp_name] = fname
    return fname


def emit_row_sort(em: ComputationEmitter, operands: list[Buf], dim: int, cmp: str, keep: int,
                  write, iota_operand: bool = False) -> None:
    """Sort every row of ``operands`` along ``dim`` with comparator ``cmp``; ``write(idx_out, j_src, pos)``
    emits the stores for output position ``pos`` (< keep) taking source row element ``j_src``.
    ``iota_operand``: the comparator also receives each element's position (TopK's index operand)."""
    C = em.gen.dialect  # the target's C (the CUDA serial strategy runs this kernel too)
    shape = operands[0].shape
    n = shape.dims[dim]
    if n == 0 or shape.num_elements == 0:
        return
    scratch = em.alloc_bytes(16 * n, f"sort{em.names.fresh('')}")
    b = em.buf
    others = [d for d in range(shape.rank) if d != dim]
    outer = {d: em.names.fresh("o") for d in others}

    def at(op: Buf, j: str) -> str:
        idx = tuple(j if d == dim else outer[d] for d in range(shape.rank))
        return C.load(op.shape.dtype, f"{op.ptr}[{linear_index(op.shape, idx)}]")

    def less(x: str, y: str) -> str:
        args = []
        for op in operands:
            args += [at(op, x), at(op, y)]
        if iota_operand:
            args += [f"(int32_t)({x})", f"(int32_t)({y})"]
        return f"{cmp}({', '.join(args)})"

    with b.block(""):
        b.line(f"int64_t* perm = (int64_t*)({scratch});")
        b.line(f"int64_t* tmp = perm + {n};")
        for d in others:
            b.line(f"for (int64_t {outer[d]} = 0; {outer[d]} < {shape.dims[d]}; ++{outer[d]}) {{")
            b._level += 1
        b.line(f"for (int64_t i = 0; i < {n}; ++i) perm[i] = i;")
        with b.block(f"for (int64_t w = 1; w < {n}; w *= 2)"):
            with b.block(f"for (int64_t lo = 0; lo < {n}; lo += 2 * w)"):
                b.line(f"const int64_t mid = lo + w < {n} ? lo + w : {n};")
                b.line(f"const int64_t hi = lo + 2 * w < {n} ? lo + 2 * w : {n};")
                b.line("int64_t a = lo, c = mid, t = lo;")
                with b.block("while (a < mid && c < hi)"):
                    b.line(f"if ({less('perm[c]', 'perm[a]')}) tmp[t++] = perm[c++]; else tmp[t++] = perm[a++];")
                b.line("while (a < mid) tmp[t++] = perm[a++];")
                b.line("while (c < hi) tmp[t++] = perm[c++];")
            b.line("int64_t* swap = perm; perm = tmp; tmp = swap;")
        with b.block(f"for (int64_t pos = 0; pos < {keep}; ++pos)"):
            write(lambda pos: tuple(pos if d == dim else outer.get(d) for d in range(shape.rank)), "perm[pos]", "pos")
        for _ in others:
            b._level -= 1
            b.line("}")


@top_level(Opcode.SORT)
def _sort(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    operands = [em.values_or_const(o) for o in inst.operands]
    if not all(isinstance(o, Buf) for o in operands):
        raise CodegenUnsupported(f"%{inst.name}: sort of tuple operands")
    (dim,) = inst.attr("dimensions")
    cmp = comparator_function(em, inst.attr("to_apply").name)
    outs = leaves(target)
    n = operands[0].shape.dims[dim]

    def write(idx_of, src, pos):
        for op, out in zip(operands, outs):
            src_idx = idx_of(src)
            dst_idx = idx_of(pos)
            em.buf.line(f"{out.ptr}[{linear_index(out.shape, dst_idx)}] = {op.ptr}[{linear_index(op.shape, src_idx)}];")
    emit_row_sort(em, operands, dim, cmp, n, write)


@top_level(Opcode.CUSTOM_CALL)
def _custom_call(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    kernel = CUSTOM_CALLS.get(inst.attr("custom_call_target"))
    if kernel is None:
        raise CodegenUnsupported(f"%{inst.name}: custom-call target {inst.attr('custom_call_target')!r} "
                                 f"is not supported by the CPU backend")
    kernel(em, inst, target)


def _topk(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    C = em.gen.dialect  # the target's C (the CUDA serial strategy runs this kernel too)
    (x,) = [em.values_or_const(o) for o in inst.operands]
    values, indices = leaves(target)
    comps = inst.attr("called_computations")
    cmp = comparator_function(em, comps[0].name)
    dim = x.shape.rank - 1
    k = values.shape.dims[-1]

    def write(idx_of, src, pos):
        em.buf.line(f"{values.ptr}[{linear_index(values.shape, idx_of(pos))}] = "
                    f"{x.ptr}[{linear_index(x.shape, idx_of(src))}];")
        em.buf.line(f"{indices.ptr}[{linear_index(indices.shape, idx_of(pos))}] = "
                    f"({C.storage(indices.shape.dtype)})({src});")
    arity = len(em.gen.module.computation(comps[0].name).parameters)
    emit_row_sort(em, [x], dim, cmp, k, write, iota_operand=arity == 4)


CUSTOM_CALLS = {"TopK": _topk}
