"""The one opcode table: every HLO opcode, its text name, arity and flags.

The printer, parser, verifier, evaluator and backends all read this table;
``tests/test_opcodes.py`` checks that each opcode has a shape rule and an
evaluator rule. Arity ``None`` means variadic.

``Group`` names the sets of opcodes that passes and backends share (as
tinygrad's ``GroupOp`` does): the ones the table has a column for are derived
from it, the others are listed once here and checked against the columns by
``tests/test_opcodes.py``. A pass that needs a set of opcodes reads a group
(or a union of groups) instead of spelling its own.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Flag(enum.Flag):
    NONE = 0
    ELEMENTWISE = enum.auto()  # output element i depends only on operand elements i
    COMMUTATIVE = enum.auto()
    UNARY_MATH = enum.auto()  # float math with a single operand
    SIDE_EFFECT = enum.auto()  # must not be removed or duplicated
    TRANSCENDENTAL = enum.auto()  # costs a library call or a long polynomial per element


E, C, U, S, T = Flag.ELEMENTWISE, Flag.COMMUTATIVE, Flag.UNARY_MATH, Flag.SIDE_EFFECT, Flag.TRANSCENDENTAL


@dataclass(frozen=True)
class OpSpec:
    text: str
    arity: int | None
    flags: Flag = Flag.NONE
    calls: tuple[str, ...] = ()  # the attributes naming its called computations, as XLA's grammar spells them


class Opcode(enum.Enum):
    """HLO opcodes; ``opcode.spec`` gives the table row."""

    # leaves
    PARAMETER = OpSpec("parameter", 0)
    CONSTANT = OpSpec("constant", 0)
    IOTA = OpSpec("iota", 0)
    AFTER_ALL = OpSpec("after-all", None)
    PARTITION_ID = OpSpec("partition-id", 0)
    REPLICA_ID = OpSpec("replica-id", 0)
    # elementwise unary
    ABS = OpSpec("abs", 1, E)
    NEGATE = OpSpec("negate", 1, E)
    SIGN = OpSpec("sign", 1, E)
    FLOOR = OpSpec("floor", 1, E | U)
    CEIL = OpSpec("ceil", 1, E | U)
    ROUND_NEAREST_AFZ = OpSpec("round-nearest-afz", 1, E | U)
    ROUND_NEAREST_EVEN = OpSpec("round-nearest-even", 1, E | U)
    EXPONENTIAL = OpSpec("exponential", 1, E | U | T)
    EXPONENTIAL_MINUS_ONE = OpSpec("exponential-minus-one", 1, E | U | T)
    LOG = OpSpec("log", 1, E | U | T)
    LOG_PLUS_ONE = OpSpec("log-plus-one", 1, E | U | T)
    SQRT = OpSpec("sqrt", 1, E | U | T)
    RSQRT = OpSpec("rsqrt", 1, E | U | T)
    CBRT = OpSpec("cbrt", 1, E | U | T)
    TANH = OpSpec("tanh", 1, E | U | T)
    LOGISTIC = OpSpec("logistic", 1, E | U | T)
    SINE = OpSpec("sine", 1, E | U | T)
    COSINE = OpSpec("cosine", 1, E | U | T)
    TAN = OpSpec("tan", 1, E | U | T)
    ERF = OpSpec("erf", 1, E | U | T)
    NOT = OpSpec("not", 1, E)
    IS_FINITE = OpSpec("is-finite", 1, E)
    POPCNT = OpSpec("popcnt", 1, E)
    CLZ = OpSpec("count-leading-zeros", 1, E)
    REAL = OpSpec("real", 1, E)
    IMAG = OpSpec("imag", 1, E)
    CONVERT = OpSpec("convert", 1, E)
    BITCAST_CONVERT = OpSpec("bitcast-convert", 1)
    REDUCE_PRECISION = OpSpec("reduce-precision", 1, E)
    COPY = OpSpec("copy", 1, E)
    # elementwise binary / ternary
    ADD = OpSpec("add", 2, E | C)
    SUBTRACT = OpSpec("subtract", 2, E)
    MULTIPLY = OpSpec("multiply", 2, E | C)
    DIVIDE = OpSpec("divide", 2, E)
    REMAINDER = OpSpec("remainder", 2, E)
    POWER = OpSpec("power", 2, E | T)
    MAXIMUM = OpSpec("maximum", 2, E | C)
    MINIMUM = OpSpec("minimum", 2, E | C)
    ATAN2 = OpSpec("atan2", 2, E | T)
    AND = OpSpec("and", 2, E | C)
    OR = OpSpec("or", 2, E | C)
    XOR = OpSpec("xor", 2, E | C)
    SHIFT_LEFT = OpSpec("shift-left", 2, E)
    SHIFT_RIGHT_LOGICAL = OpSpec("shift-right-logical", 2, E)
    SHIFT_RIGHT_ARITHMETIC = OpSpec("shift-right-arithmetic", 2, E)
    COMPARE = OpSpec("compare", 2, E)
    COMPLEX = OpSpec("complex", 2, E)
    SELECT = OpSpec("select", 3, E)
    CLAMP = OpSpec("clamp", 3, E)
    # shape and data movement
    BROADCAST = OpSpec("broadcast", 1)
    RESHAPE = OpSpec("reshape", 1)
    DYNAMIC_RESHAPE = OpSpec("dynamic-reshape", None)
    BITCAST = OpSpec("bitcast", 1)
    TRANSPOSE = OpSpec("transpose", 1)
    SLICE = OpSpec("slice", 1)
    DYNAMIC_SLICE = OpSpec("dynamic-slice", None)
    DYNAMIC_UPDATE_SLICE = OpSpec("dynamic-update-slice", None)
    CONCATENATE = OpSpec("concatenate", None)
    PAD = OpSpec("pad", 2)
    REVERSE = OpSpec("reverse", 1)
    GATHER = OpSpec("gather", 2)
    SCATTER = OpSpec("scatter", None, calls=("to_apply",))
    GET_DIMENSION_SIZE = OpSpec("get-dimension-size", 1)
    SET_DIMENSION_SIZE = OpSpec("set-dimension-size", 2)
    # reductions and windows
    REDUCE = OpSpec("reduce", None, calls=("to_apply",))
    REDUCE_WINDOW = OpSpec("reduce-window", None, calls=("to_apply",))
    SELECT_AND_SCATTER = OpSpec("select-and-scatter", 3, calls=("select", "scatter"))
    # dense math
    DOT = OpSpec("dot", 2)
    CONVOLUTION = OpSpec("convolution", 2)
    FFT = OpSpec("fft", 1)  # fft_type=FFT|IFFT|RFFT|IRFFT over the last len(fft_length) dims
    # structure and control flow
    TUPLE = OpSpec("tuple", None)
    GET_TUPLE_ELEMENT = OpSpec("get-tuple-element", 1)
    CALL = OpSpec("call", None, calls=("to_apply",))
    FUSION = OpSpec("fusion", None, calls=("calls",))
    WHILE = OpSpec("while", 1, calls=("condition", "body"))
    CONDITIONAL = OpSpec("conditional", None,
                         calls=("true_computation", "false_computation", "branch_computations"))
    MAP = OpSpec("map", None, calls=("to_apply",))
    SORT = OpSpec("sort", None, calls=("to_apply",))
    TOPK = OpSpec("topk", 1)
    OPTIMIZATION_BARRIER = OpSpec("opt-barrier", 1)
    CUSTOM_CALL = OpSpec("custom-call", None, calls=("called_computations", "to_apply"))
    # random
    RNG = OpSpec("rng", 2, S)
    RNG_BIT_GENERATOR = OpSpec("rng-bit-generator", 1)
    RNG_GET_AND_UPDATE_STATE = OpSpec("rng-get-and-update-state", 0, S)

    @property
    def spec(self) -> OpSpec:
        return self.value

    @property
    def text(self) -> str:
        return self.value.text

    @property
    def arity(self) -> int | None:
        return self.value.arity

    @property
    def calls(self) -> tuple[str, ...]:
        return self.value.calls

    @property
    def is_elementwise(self) -> bool:
        return Flag.ELEMENTWISE in self.value.flags

    @property
    def is_commutative(self) -> bool:
        return Flag.COMMUTATIVE in self.value.flags

    @property
    def has_side_effect(self) -> bool:
        return Flag.SIDE_EFFECT in self.value.flags

    @property
    def is_transcendental(self) -> bool:
        return Flag.TRANSCENDENTAL in self.value.flags

    def __str__(self) -> str:
        return self.value.text

    @staticmethod
    def from_text(text: str) -> "Opcode":
        try:
            return _BY_TEXT[text]
        except KeyError:
            raise ValueError(f"unknown opcode {text!r}") from None


_BY_TEXT = {op.text: op for op in Opcode}

# Every attribute that names called computations (the union of the table's ``calls`` columns).
CALLED_COMPUTATION_ATTRS = tuple(dict.fromkeys(key for op in Opcode for key in op.calls))


def _where(keep) -> frozenset[Opcode]:
    return frozenset(op for op in Opcode if keep(op))


class Group:
    """Named sets of opcodes (frozensets), for ``op in Group.X`` and unions of groups."""

    # --- read from the table's columns
    ELEMENTWISE = _where(lambda op: op.is_elementwise)
    UNARY = _where(lambda op: op.is_elementwise and op.arity == 1)
    BINARY = _where(lambda op: op.is_elementwise and op.arity == 2)
    TERNARY = _where(lambda op: op.is_elementwise and op.arity == 3)
    COMMUTATIVE = _where(lambda op: op.is_commutative)
    TRANSCENDENTAL = _where(lambda op: op.is_transcendental)
    SIDE_EFFECT = _where(lambda op: op.has_side_effect)
    CALLERS = _where(lambda op: bool(op.calls))  # hold called computations

    # --- listed here (each checked against the columns in tests/test_opcodes.py)
    # The same bytes as the operand under another shape: a backend may alias the operand's buffer.
    VIEW = frozenset({Opcode.RESHAPE, Opcode.BITCAST})
    # The operand's elements, unchanged and in the same linear order.
    FORWARDING = VIEW | {Opcode.COPY}
    # Each output element is one operand element at a remapped index: no arithmetic, no dynamic index.
    MOVEMENT = VIEW | {Opcode.BROADCAST, Opcode.TRANSPOSE, Opcode.SLICE, Opcode.REVERSE}
    # Combine many operand elements into one through a called reducer.
    REDUCTIONS = frozenset({Opcode.REDUCE, Opcode.REDUCE_WINDOW, Opcode.SELECT_AND_SCATTER})
    # Dense contractions that backends hand to a library (oneDNN, a tiled GPU kernel).
    CONTRACTIONS = frozenset({Opcode.DOT, Opcode.CONVOLUTION})
    # Run their called computations as sequential code, on the caller's buffers.
    CONTROL_FLOW = frozenset({Opcode.CALL, Opcode.WHILE, Opcode.CONDITIONAL})
    # Group or pick results without touching data (their buffers alias their operands').
    TUPLE_PLUMBING = frozenset({Opcode.TUPLE, Opcode.GET_TUPLE_ELEMENT})
    # Random numbers: stateful, or a bit stream with no reference value.
    RANDOM = frozenset({Opcode.RNG, Opcode.RNG_BIT_GENERATOR, Opcode.RNG_GET_AND_UPDATE_STATE})
    # The position of this program in a replicated/partitioned run (0 in a single-device run).
    DEVICE_ID = frozenset({Opcode.PARTITION_ID, Opcode.REPLICA_ID})

    @classmethod
    def all(cls) -> dict[str, frozenset[Opcode]]:
        """Every group by name."""
        return {k: v for k, v in vars(cls).items() if isinstance(v, frozenset)}
