"""Elementwise unary ops: a table from TF op type to its HLO lowering."""

from __future__ import annotations

from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS, NUMERIC, SIGNED_INTS
from hlo.opcodes import Opcode

# TF ops that are exactly one HLO opcode.
_DIRECT = {
    "Neg": (Opcode.NEGATE, NUMERIC),
    "Exp": (Opcode.EXPONENTIAL, FLOATS),
    "Tanh": (Opcode.TANH, FLOATS),
}


def _direct(opcode: Opcode):
    def lower(ctx):
        (x,) = ctx.inputs
        return ctx.b.op(opcode, x)
    return lower


for _op, (_opcode, _dtypes) in _DIRECT.items():
    register_lowering(_op, dtypes=_dtypes)(_direct(_opcode))


@register_lowering("Abs", dtypes=FLOATS | SIGNED_INTS)
def abs_(ctx):
    (x,) = ctx.inputs
    return ctx.b.abs(x)
