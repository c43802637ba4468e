"""Serial TopK kernels: the ``topk`` opcode and XLA's ``TopK`` custom call (the custom calls a
backend runs, ``CUSTOM_CALLS``, by target name).

Each row along the last dim is sorted with the stable row sort of ``sort.py`` and the first k values
and their s32 positions are written. ``topk`` orders by value, largest first unless
``largest=false``, floats in total order (NaN above +inf); the ``TopK`` custom call by its
comparator computation (which may also receive each element's position, when it has 4 parameters).
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.serial import SerialEmitter, serial_kernel
from backends.codegen.serial.sort import comparator_function, emit_row_sort
from backends.codegen.values import Buf, leaves
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


def _topk_comparator(em: SerialEmitter, dtype, largest: bool) -> str:
    """``int topk_cmp_N(a, b)``: whether a goes strictly before b (memoized per type/order)."""
    gen = em.gen
    C = gen.dialect
    cache = gen.__dict__.setdefault("_topk_comparators", {})
    key = (dtype, largest)
    if key not in cache:
        fname = f"topk_cmp_{len(cache)}"
        ct = C.compute(dtype)
        if dtype.is_float:
            total = "tfxla_total_f64" if ct == "double" else "tfxla_total_f32"
            a, b = f"{total}(a)", f"{total}(b)"
        else:
            a, b = "a", "b"
        text = IndentedBuffer()
        with text.block(f"{C.inline_function} int {fname}({ct} a, {ct} b)"):
            text.line(f"return {a} {'>' if largest else '<'} {b};")
        gen.globals.splice(text)
        cache[key] = fname
    return cache[key]


def _emit_topk(em: SerialEmitter, x: Buf, target, cmp: str, iota_operand: bool = False) -> None:
    """The first k elements of every row of ``x`` in ``cmp`` order, and their positions, into ``target``."""
    values, indices = leaves(target)
    storage = em.gen.dialect.storage(indices.shape.dtype)

    def write(idx_of, src, pos):
        em.buf.line(f"{values.at(idx_of(pos))} = {x.at(idx_of(src))};")
        em.buf.line(f"{indices.at(idx_of(pos))} = ({storage})({src});")
    k = values.shape.dims[-1]
    if k:
        emit_row_sort(em, [x], x.shape.rank - 1, cmp, k, write, iota_operand)


@serial_kernel(Opcode.TOPK)
def _topk(em: SerialEmitter, inst: HloInstruction, target) -> None:
    x = em.value(inst.operands[0])
    if not isinstance(x, Buf):
        raise CodegenUnsupported(f"%{inst.name}: topk of a tuple")
    _emit_topk(em, x, target, _topk_comparator(em, x.shape.dtype, inst.attr("largest", True)))


def _topk_custom_call(em: SerialEmitter, inst: HloInstruction, target) -> None:
    (x,) = [em.value(o) for o in inst.operands]
    comp = inst.attr("called_computations")[0].name
    arity = len(em.gen.module.computation(comp).parameters)
    _emit_topk(em, x, target, comparator_function(em, comp), iota_operand=arity == 4)


CUSTOM_CALLS = {"TopK": _topk_custom_call}


@serial_kernel(Opcode.CUSTOM_CALL)
def _custom_call(em: SerialEmitter, inst: HloInstruction, target) -> None:
    kernel = CUSTOM_CALLS.get(inst.attr("custom_call_target"))
    if kernel is None:
        raise CodegenUnsupported(f"%{inst.name}: custom-call target {inst.attr('custom_call_target')!r} "
                                 f"is not supported by the {em.gen.dialect.backend} backend")
    kernel(em, inst, target)
