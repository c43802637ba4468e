"""The serial sort kernel (any comparator, stable), and the row sort TopK uses too.

The comparator computation becomes a helper function of 2N scalars (``static inline`` in C,
``__device__`` in CUDA: the dialect's ``inline_function``). Each row along the sort dimension is
sorted as a permutation with a bottom-up stable merge sort (the right element moves first only when
the comparator says it is strictly less), then every operand is gathered through the permutation.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer, close_loops, open_loops
from backends.codegen.elemental import ElementalEmitter, constant_param
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.serial import SerialEmitter, serial_kernel
from backends.codegen.values import Buf, check_array, leaves
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def comparator_function(em: SerialEmitter, comp_name: str) -> str:
    """Emit ``int cmp_N(a0, b0, a1, b1, ...)`` for a comparator computation (memoized per module)."""
    gen = em.gen
    C = gen.dialect
    cache = gen.__dict__.setdefault("_comparators", {})
    if comp_name in cache:
        return cache[comp_name]
    fname = f"cmp_{len(cache)}"
    comp = gen.module.computation(comp_name)
    args = [f"x{k}" for k in range(len(comp.parameters))]
    body = IndentedBuffer()
    sub = ElementalEmitter(C, gen.module, comp, [constant_param(a) for a in args], body, gen.names, gen.constant_ref)
    result = sub.emit(comp.root_name, ())
    params = ", ".join(f"{C.compute(check_array(p.shape, f'comparator parameter %{p.name}', C.storage).dtype)} {a}"
                       for p, a in zip(comp.parameters, args))
    text = IndentedBuffer()
    with text.block(f"{C.inline_function} int {fname}({params})"):
        text.splice(body)
        text.line(f"return ({result}) != 0;")
    gen.globals.splice(text)
    cache[comp_name] = fname
    return fname


def emit_row_sort(em: SerialEmitter, operands: list[Buf], dim: int, cmp: str, keep: int,
                  write, iota_operand: bool = False) -> None:
    """Sort every row of ``operands`` along ``dim`` with comparator ``cmp``; ``write(idx_out, j_src, pos)``
    emits the stores for output position ``pos`` (< keep) taking source row element ``j_src``.
    ``iota_operand``: the comparator also receives each element's position (TopK's index operand)."""
    C = em.gen.dialect
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
        open_loops(b, [(outer[d], shape.dims[d]) for d in others])
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
        close_loops(b, len(others))


@serial_kernel(Opcode.SORT)
def _sort(em: SerialEmitter, inst: HloInstruction, target) -> None:
    operands = [em.value(o) for o in inst.operands]
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
