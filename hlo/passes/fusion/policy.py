"""What may fuse, and at what cost: the opcode tables and small predicates the fusion phases share.

Everything here is a pure function of instructions (no graph state), so the
phases and the tests read one source of truth:

* ``NOT_FUSIBLE`` maps every opcode that never enters a fusion to the reason
  the decision log prints; ``FUSIBLE_DATA`` lists the data-movement opcodes
  that do (all side-effect-free elementwise opcodes do too). Only opcodes
  the shared elemental emitter handles inside a loop nest fuse
  (``backends/codegen/elemental_*.py``); window, gather and convolution ops,
  headed for dedicated kernels, stay unfused for now, so a fusion never
  hides an op from a dedicated emitter.
* ``expense`` names the expensive operation in an instruction (a
  transcendental function, integer division, a reduction, a dot, a map) or
  returns None; expensive work is never duplicated and never recomputed per
  element.
* ``access`` says how a user reads one operand: at the same index
  (elementwise), each element at most once at another index (reshape,
  transpose, slice, pad, concatenate, the reduced operand of a reduce) or
  repeatedly (an expanding broadcast, a dot, a scalar operand of an
  elementwise op, a reduce's init value, dynamic-slice start indices).
* ``work`` counts the arithmetic a producer would repeat when duplicated:
  pure index remapping and constants are free.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from hlo.ir import HloInstruction
from hlo.opcodes import Group, Opcode
from hlo.shapes import Shape

O = Opcode


@dataclass(frozen=True)
class FusionOptions:
    """Knobs of the fusion pass (defaults suit the CPU backend)."""

    multi_output: bool = True  # run the multi-output phase (sibling and producer-consumer)
    max_fused_instructions: int = 256  # instructions in one fused computation
    max_fusion_operands: int = 64  # parameters of one fused computation
    max_copies: int = 3  # places one arithmetic instruction may be computed in, once duplicated into users
    max_sibling_refusals: int = 8  # sibling candidates tried per fusion before moving on


# Data movement and structure the elemental emitter handles inside a loop nest.
FUSIBLE_DATA = Group.MOVEMENT | Group.CONTRACTIONS | {
    O.DYNAMIC_SLICE, O.DYNAMIC_UPDATE_SLICE, O.PAD, O.CONCATENATE, O.IOTA, O.CONSTANT, O.REDUCE, O.MAP,
}

_OWN_KERNEL = "runs as its own kernel, not inside a loop nest"
_NOT_YET = "not fused yet: it stays its own loop nest"
NOT_FUSIBLE: dict[Opcode, str] = {
    O.PARAMETER: "is a parameter",
    O.TUPLE: "is a tuple (tuples only group results)",
    O.GET_TUPLE_ELEMENT: "is a get-tuple-element (tuple plumbing)",
    O.FUSION: "is already a fusion (existing fusions are left as they are)",
    O.CALL: "is a call (control flow)",
    O.WHILE: "is a while loop (control flow)",
    O.CONDITIONAL: "is a conditional (control flow)",
    O.CUSTOM_CALL: "is a custom-call (opaque)",
    O.SORT: f"is a sort ({_OWN_KERNEL})",
    O.TOPK: f"is a topk ({_OWN_KERNEL})",
    O.FFT: f"is an fft ({_OWN_KERNEL})",
    O.SCATTER: f"is a scatter ({_OWN_KERNEL})",
    O.SELECT_AND_SCATTER: f"is a select-and-scatter ({_OWN_KERNEL})",
    O.GATHER: f"is a gather ({_NOT_YET})",
    O.REDUCE_WINDOW: f"is a reduce-window ({_NOT_YET}; a window reads each input element many times)",
    O.BITCAST_CONVERT: f"is a bitcast-convert ({_NOT_YET})",
    O.DYNAMIC_RESHAPE: "is a dynamic-reshape (dynamic shapes)",
    O.RNG: "is an rng (random, side effect)",
    O.RNG_BIT_GENERATOR: "is an rng-bit-generator (random state)",
    O.RNG_GET_AND_UPDATE_STATE: "is an rng-get-and-update-state (side effect)",
    O.AFTER_ALL: "is an after-all (token)",
    O.PARTITION_ID: "is a partition-id",
    O.REPLICA_ID: "is a replica-id",
    O.GET_DIMENSION_SIZE: "is a get-dimension-size (dynamic shapes)",
    O.SET_DIMENSION_SIZE: "is a set-dimension-size (dynamic shapes)",
    O.OPTIMIZATION_BARRIER: "is an optimization barrier",
}

# Opcodes whose presence makes a fusion kInput (reduce) or kOutput (dot, convolution: library kernels
# with their elementwise epilogue).
REDUCTION_HEROES = frozenset({O.REDUCE})
OUTPUT_HEROES = Group.CONTRACTIONS
HEROES = REDUCTION_HEROES | OUTPUT_HEROES

_INTEGER_DIVISION = frozenset({O.DIVIDE, O.REMAINDER})
# Pure index remapping and leaves: duplicating them repeats no arithmetic.
FREE = Group.MOVEMENT | Group.FORWARDING | {O.IOTA, O.CONSTANT}


def not_fusible_reason(inst: HloInstruction) -> str | None:
    """Why ``inst`` can never be part of a fusion (None when it can)."""
    reason = NOT_FUSIBLE.get(inst.opcode)
    if reason is not None:
        return reason
    if inst.opcode.has_side_effect:
        return f"is a {inst.opcode.text} (side effect)"
    if not (inst.opcode.is_elementwise or inst.opcode in FUSIBLE_DATA):
        return f"is a {inst.opcode.text} (not fusible)"
    if inst.attr("control-predecessors"):
        return "has control dependencies"
    return None


def expense(inst: HloInstruction) -> str | None:
    """The name of the expensive operation ``inst`` performs, or None when it is cheap."""
    op = inst.opcode
    if op.is_transcendental or op in HEROES or op is O.MAP:
        return op.text
    if op in _INTEGER_DIVISION and isinstance(inst.shape, Shape) and inst.shape.dtype.is_integral:
        return f"integer {op.text}"
    return None


def work(inst: HloInstruction) -> int:
    """Arithmetic instructions per element that duplicating ``inst`` repeats (0 for index remapping)."""
    return 0 if inst.opcode in FREE else 1


class Access(enum.Enum):
    SAME = "same index"  # elementwise: the user's element i reads the operand's element i
    ONCE = "each element at most once"  # at a remapped index
    REUSE = "elements read repeatedly"


def _elements(shape) -> int:
    return shape.num_elements if isinstance(shape, Shape) else 1


def access(user: HloInstruction, slot: int, operand_shape) -> Access:
    """How ``user`` reads its operand number ``slot`` (whose shape is ``operand_shape``)."""
    op = user.opcode
    user_shape = user.shape
    same = isinstance(operand_shape, Shape) and isinstance(user_shape, Shape) \
        and operand_shape.dims == user_shape.dims
    if op.is_elementwise or op is O.MAP:
        return Access.SAME if same else Access.REUSE
    if same and isinstance(user_shape, Shape) and (
            op is O.RESHAPE or (op in (O.BROADCAST, O.TRANSPOSE)
                                and tuple(user.attr("dimensions", ())) == tuple(range(len(user_shape.dims))))):
        return Access.SAME  # a no-op reshape, broadcast or transpose
    if op is O.BROADCAST:
        return Access.ONCE if _elements(user.shape) <= _elements(operand_shape) else Access.REUSE
    if op in Group.MOVEMENT or op is O.CONCATENATE:  # (an expanding broadcast returned above)
        return Access.ONCE
    if op is O.PAD or op is O.DYNAMIC_SLICE:
        return Access.ONCE if slot == 0 else Access.REUSE
    if op is O.DYNAMIC_UPDATE_SLICE:
        return Access.ONCE if slot <= 1 else Access.REUSE
    if op is O.REDUCE:
        return Access.ONCE if slot < len(user.operands) // 2 else Access.REUSE
    return Access.REUSE  # dot and anything not listed: assume the worst


def same_dims(a, b) -> bool:
    """Whether two (possibly tuple) shapes have identical dims in every array element."""
    da = [s.dims for s in a.leaves()]
    db = [s.dims for s in b.leaves()]
    return len(set(da + db)) == 1
