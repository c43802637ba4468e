"""Shape inference: one rule per opcode, used by the verifier and the builder.

A rule receives a ``ShapeContext`` (operand shapes, attributes, the declared
shape when there is one, signatures of called computations) and returns the
instruction's shape, or raises ``ShapeError`` saying what is inconsistent.
Opcodes whose result cannot be derived from operands alone (reshape,
broadcast, convert, iota, custom-call, ...) check the declared shape instead.
Rules register with ``@shape_rule(Opcode.X, ...)``.
"""

from __future__ import annotations


from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from hlo.attributes import Attrs, ProgramShape
from hlo.literal import Literal
from hlo.opcodes import Opcode
from hlo.rule_modules import RuleModule
from hlo.shapes import ShapeLike


class ShapeError(Exception):
    """An instruction whose operands, attributes or declared shape do not fit together."""


@dataclass
class ShapeContext:
    opcode: Opcode
    operands: list[ShapeLike]
    attrs: Attrs = field(default_factory=Attrs)
    declared: ShapeLike | None = None
    called: Mapping[str, ProgramShape] = field(default_factory=dict)
    parameter_number: int | None = None
    literal: Literal | None = None

    def attr(self, key: str, default: Any = ...) -> Any:
        if key in self.attrs:
            return self.attrs[key]
        if default is ...:
            raise ShapeError(f"{self.opcode.text} requires attribute {key}=")
        return default

    def require_declared(self) -> ShapeLike:
        if self.declared is None:
            raise ShapeError(f"{self.opcode.text} needs its result shape to be given")
        return self.declared

    def computation(self, key: str) -> ProgramShape:
        """Signature of the computation named by attribute ``key``."""
        ref = self.attr(key)
        try:
            return self.called[ref.name]
        except (KeyError, AttributeError):
            raise ShapeError(f"{key}={ref} does not name a computation of the module") from None


ShapeRule = Callable[[ShapeContext], ShapeLike]
SHAPE_RULES: dict[Opcode, ShapeRule] = {}


def shape_rule(*opcodes: Opcode):
    def register(fn: ShapeRule) -> ShapeRule:
        for op in opcodes:
            if op in SHAPE_RULES:
                raise ValueError(f"duplicate shape rule for {op.text}")
            SHAPE_RULES[op] = fn
        return fn
    return register


def infer_shape(ctx: ShapeContext) -> ShapeLike:
    """The shape of an instruction; raises ``ShapeError``."""
    _load_rules()
    rule = SHAPE_RULES.get(ctx.opcode)
    if rule is None:
        raise ShapeError(f"no shape rule for opcode {ctx.opcode.text}")
    arity = ctx.opcode.arity
    if arity is not None and len(ctx.operands) != arity:
        raise ShapeError(f"{ctx.opcode.text} takes {arity} operand(s), got {len(ctx.operands)}")
    return rule(ctx)


_load_rules = RuleModule("hlo.shape_inference.rules")  # imports the module that registers every rule, on first use
