"""Top-level kernels for the small structural opcodes, and explicit refusals.

* topk: each row along the last dim is sorted (stable) by value, largest
  first unless ``largest=false``, floats in total order (NaN above +inf), and
  the first k values and their s32 positions are written; it reuses the row
  sort of ``kernels_sort``.
* opt-barrier: a copy of its (tuple) operand; after-all: nothing (a token has
  no data, see ``ComputationEmitter.alloc_value``).
* rng, rng-bit-generator, rng-get-and-update-state are refused with a reason:
  their values depend on XLA's generator state and streams, which the
  evaluator (the spec) does not define either.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.cpu.codegen import Buf, ComputationEmitter, Value, leaves, top_level
from backends.cpu.kernels_sort import emit_row_sort
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def _topk_comparator(em: ComputationEmitter, dtype, largest: bool) -> str:
    """``static inline int topk_cmp_N(a, b)``: whether a goes strictly before b (memoized per type/order)."""
    gen = em.gen
    cache = gen.__dict__.setdefault("_topk_comparators", {})
    key = (dtype, largest)
    if key not in cache:
        fname = f"topk_cmp_{len(cache)}"
        ct = gen.dialect.compute(dtype)
        if dtype.is_float:
            total = "tfxla_total_f64" if ct == "double" else "tfxla_total_f32"
            a, b = f"{total}(a)", f"{total}(b)"
        else:
            a, b = "a", "b"
        text = IndentedBuffer()
        with text.block(f"{gen.dialect.inline_function} int {fname}({ct} a, {ct} b)"):
            text.line(f"return {a} {'>' if largest else '<'} {b};")
        gen.globals.splice(text)
        cache[key] = fname
    return cache[key]


@top_level(Opcode.TOPK)
def _topk(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    C = em.gen.dialect  # the target's C (the CUDA serial strategy runs this kernel too)
    x = em.values_or_const(inst.operands[0])
    if not isinstance(x, Buf):
        raise CodegenUnsupported(f"%{inst.name}: topk of a tuple")
    values, indices = leaves(target)
    cmp = _topk_comparator(em, x.shape.dtype, inst.attr("largest", True))
    k = values.shape.dims[-1]

    def write(idx_of, src, pos):
        em.buf.line(f"{values.ptr}[{linear_index(values.shape, idx_of(pos))}] = "
                    f"{x.ptr}[{linear_index(x.shape, idx_of(src))}];")
        em.buf.line(f"{indices.ptr}[{linear_index(indices.shape, idx_of(pos))}] = "
                    f"({C.storage(indices.shape.dtype)})({src});")
    if k:
        emit_row_sort(em, [x], x.shape.rank - 1, cmp, k, write)


@top_level(Opcode.OPTIMIZATION_BARRIER)
def _opt_barrier(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    for dst, src in zip(leaves(target), leaves(em.values_or_const(inst.operands[0]))):
        em.emit_copy(dst, src)


@top_level(Opcode.AFTER_ALL)
def _after_all(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    return None


@top_level(Opcode.RNG, Opcode.RNG_BIT_GENERATOR, Opcode.RNG_GET_AND_UPDATE_STATE)
def _rng(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    raise CodegenUnsupported(f"%{inst.name}: {inst.opcode.text}: random number generation is not supported by "
                             f"the CPU backend (XLA's generator state and streams are not specified by the "
                             f"reference evaluator either)")
