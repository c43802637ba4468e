"""Elemental rules for the remaining small opcodes: reduce-precision, dynamic-reshape, and the
constants get-dimension-size, partition-id and replica-id.

* reduce-precision rounds the stored bits of each element to a float format with
  fewer exponent/mantissa bits (round to nearest even; overflow to +-inf,
  underflow to +-0; NaN kept as is), bit for bit as the evaluator does, on the
  element's own storage type (f16 and bf16 on their 16 bits, not widened).
* dynamic-reshape places the operand, reshaped to the run-time sizes (its
  scalar operands 1..), at the start of the result's bounds; the rest is 0.
  Sizes whose product is not the operand's size give unspecified values but
  never read out of bounds.
* get-dimension-size is the static size of the dim (values keep their bound);
  partition-id and replica-id are 0 (one device).
"""

from __future__ import annotations

from backends.codegen.elemental import ElementalEmitter, Value, array_shape, elemental
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import Index, delinearize
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape

# Float formats: (exponent bits, mantissa bits) of each type reduce-precision accepts.
_FLOAT_FORMAT = {P.F16: (5, 10), P.BF16: (8, 7), P.F32: (8, 23), P.F64: (11, 52)}
_UINT = {16: "uint16_t", 32: "uint32_t", 64: "uint64_t"}


def _u(value: int, width: int) -> str:
    return f"UINT64_C({value})" if width == 64 else f"{value}u"


@elemental(Opcode.REDUCE_PRECISION)
def _reduce_precision(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    t = array_shape(inst).dtype
    if t not in _FLOAT_FORMAT:
        raise CodegenUnsupported(f"%{inst.name}: reduce-precision of {t.value} is not supported")
    ebits, mbits = inst.attr("exponent_bits"), inst.attr("mantissa_bits")
    src_e, src_m = _FLOAT_FORMAT[t]
    width = 1 + src_e + src_m
    u = _UINT[width]
    x = em.operand(inst, 0, idx)
    stored = em.tmp(em.dialect.storage(t), em.dialect.store(t, x), "rp")
    v = em.var(u, "0", "rp")
    em.buf.line(f"memcpy(&{v}, &{stored}, {width // 8});")
    if mbits < src_m:
        shift = src_m - mbits
        em.buf.line(f"{v} = ({u})(({v} + (({v} >> {shift}) & 1u) + {_u((1 << (shift - 1)) - 1, width)}) "
                    f"& ~({u}){_u((1 << shift) - 1, width)});")
    if ebits < src_e:
        bias, reduced = (1 << (src_e - 1)) - 1, (1 << (ebits - 1)) - 1
        exp_mask = ((1 << src_e) - 1) << src_m
        sign = em.tmp(u, f"({u})({v} & {_u(1 << (width - 1), width)})", "rp")
        exponent = em.tmp(u, f"({u})({v} & {_u(exp_mask, width)})", "rp")
        em.buf.line(f"if ({exponent} > {_u((bias + reduced) << src_m, width)}) "
                    f"{v} = ({u})({sign} | {_u(exp_mask, width)});")
        em.buf.line(f"else if ({exponent} <= {_u((bias - reduced) << src_m, width)}) {v} = {sign};")
    out = em.names.fresh("rp")
    em.buf.line(f"{em.dialect.storage(t)} {out}; memcpy(&{out}, &{v}, {width // 8});")
    return em.tmp(em.dialect.compute(t), f"isnan({x}) ? {x} : {em.dialect.load(t, out)}", "rp")


@elemental(Opcode.GET_DIMENSION_SIZE)
def _get_dimension_size(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    (d,) = inst.attr("dimensions")
    return em.dialect.literal(em.operand_shape(inst, 0).dims[d], array_shape(inst).dtype)


@elemental(Opcode.PARTITION_ID, Opcode.REPLICA_ID)
def _device_id(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    return em.dialect.literal(0, array_shape(inst).dtype)


@elemental(Opcode.DYNAMIC_RESHAPE)
def _dynamic_reshape(em: ElementalEmitter, inst: HloInstruction, idx: Index) -> Value:
    src = em.operand_shape(inst, 0)
    sizes = [em.tmp("int64_t", f"(int64_t)({em.operand(inst, 1 + d, ())})", "n")
             for d in range(array_shape(inst).rank)]
    offset = em.tmp("int64_t", " + ".join(
        " * ".join([i] + sizes[d + 1:]) for d, i in enumerate(idx)) or "0", "o")
    # Sizes that do not multiply to the operand's size are invalid (the evaluator refuses them); the
    # offset check keeps the read in bounds whatever they are.
    inside = " && ".join([f"{i} < {n}" for i, n in zip(idx, sizes)] + [f"{offset} < {src.num_elements}"])
    value = em.var(em.dialect.compute(array_shape(inst).dtype), "0")
    with em.buf.block(f"if ({inside})"):
        em.push()
        em.buf.line(f"{value} = {em.operand(inst, 0, delinearize(offset, Shape(src.dtype, src.dims)))};")
        em.pop()
    return value
