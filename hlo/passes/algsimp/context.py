"""The rule registry and the rewrite context that algebraic-simplifier rules work through.

A rule is a small function registered under one opcode::

    @rule(Opcode.ADD)
    def add_negative_zero(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
        ...

It returns ``None`` (does not apply), the name of an existing instruction
(every use of ``inst`` is redirected to it), or a new ``HloInstruction`` built
with ``ctx.new`` (it takes over ``inst``'s name, so ``inst``'s users need no
change; helpers it needs are built with ``ctx.new`` too and are added with it).

Invariants the driver checks when it commits a replacement, so that a faulty
rule fails loudly instead of corrupting the module: the replacement's shape
equals ``inst``'s exactly (element type, dims and layout), and every new
instruction's declared shape agrees with shape inference. Helpers built by a
rule that then returns ``None`` are dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Union

import numpy as np

from hlo.attributes import Attrs, ProgramShape
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.literal import Literal
from hlo.opcodes import Group, Opcode
from hlo.passes.editor import ComputationEditor
from hlo.shape_inference import ShapeContext, ShapeError, infer_shape
from hlo.shapes import Layout, Shape, ShapeLike

Replacement = Union[str, HloInstruction, None]
RuleFn = Callable[["RewriteContext", HloInstruction], Replacement]


@dataclass(frozen=True)
class Rule:
    name: str
    opcode: Opcode
    fn: RuleFn


# opcode -> rules, in registration order (the order the driver tries them)
RULES: dict[Opcode, list[Rule]] = {}
_NAMES: set[str] = set()


def rule(opcode: Opcode) -> Callable[[RuleFn], RuleFn]:
    """Register ``fn`` as a rewrite rule for ``opcode``; its function name is the rule's name."""

    def register(fn: RuleFn) -> RuleFn:
        if fn.__name__ in _NAMES:
            raise ValueError(f"duplicate algebraic-simplifier rule name {fn.__name__!r}")
        _NAMES.add(fn.__name__)
        RULES.setdefault(opcode, []).append(Rule(fn.__name__, opcode, fn))
        return fn

    return register


def all_rules() -> list[Rule]:
    """Every registered rule, grouped by opcode in the opcode table's order."""
    return [r for op in Opcode for r in RULES.get(op, ())]


class RuleError(AssertionError):
    """A rule produced an ill-formed replacement (a bug in the rule, never in the input)."""


# --- values of constants -------------------------------------------------------------

# Instructions whose every element equals their operand's (when that operand is uniform).
_VALUE_FORWARDING = Group.FORWARDING | {Opcode.BROADCAST}


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Bitwise equality of two 0-d values of one dtype (so -0.0 differs from 0.0)."""
    return a.dtype == b.dtype and np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


class RewriteContext:
    """What a rule sees: the computation being edited (current state), the module, and a builder."""

    def __init__(self, module: HloModule, editor: ComputationEditor, signatures: dict[str, ProgramShape]):
        self.module = module
        self.editor = editor
        self.signatures = signatures
        self._current: HloInstruction | None = None  # set by ``begin``
        self.staged: list[HloInstruction] = []
        # name -> its users (a dict as an ordered set), kept up to date by ``commit``
        self._users: dict[str, dict[str, None]] = {n: {} for n in editor.order}
        for n in editor.order:
            for o in editor[n].operands:
                self._users.setdefault(o, {})[n] = None

    @property
    def current(self) -> HloInstruction:
        """The instruction the rules are looking at."""
        if self._current is None:
            raise RuntimeError("RewriteContext.begin(inst) was not called")
        return self._current

    # --- queries ------------------------------------------------------------
    def get(self, name: str) -> HloInstruction:
        return self.editor[name]

    def operand(self, inst: HloInstruction, i: int = 0) -> HloInstruction:
        return self.editor[inst.operands[i]]

    def operands(self, inst: HloInstruction) -> list[HloInstruction]:
        return [self.editor[o] for o in inst.operands]

    def users(self, inst: HloInstruction) -> list[str]:
        """Names of the instructions using ``inst`` now (the ROOT marker not included)."""
        return list(self._users.get(inst.name, ()))

    def computation(self, name: str) -> HloComputation:
        return self.module.computation(name)

    def uniform_value(self, inst: HloInstruction) -> np.ndarray | None:
        """The value every element of ``inst`` has (a 0-d array of its dtype), when ``inst`` is a
        constant with all elements equal, or a broadcast/reshape/copy of one; else None."""
        for _ in range(64):
            if inst.opcode in _VALUE_FORWARDING and isinstance(inst.shape, Shape):
                operand = self.operand(inst)
                if not isinstance(operand.shape, Shape) or operand.shape.dtype != inst.shape.dtype:
                    return None
                inst = operand
                continue
            break
        if inst.opcode is not Opcode.CONSTANT or inst.literal is None or inst.literal.array is None:
            return None
        arr = inst.literal.array
        if arr.size == 0:
            return None
        raw = np.frombuffer(np.ascontiguousarray(arr).tobytes(), np.uint8).reshape(arr.size, -1)
        if not (raw == raw[0]).all():
            return None
        return np.array(arr.reshape(-1)[0])

    def has_value(self, inst: HloInstruction, value) -> bool:
        """``inst`` is uniformly ``value`` (compared bitwise in ``inst``'s dtype: -0.0 is not 0.0)."""
        v = self.uniform_value(inst)
        if v is None:
            return False
        with np.errstate(all="ignore"):
            want = np.array(value).astype(v.dtype)
        return same_bits(v, want)

    # --- building -------------------------------------------------------------
    def like(self, dtype: PrimitiveType, dims, like: ShapeLike | None = None) -> Shape:
        """An array shape for a helper: default layout, or none if ``like`` (default: the current
        instruction's shape) is printed without layouts."""
        like = like if like is not None else self.current.shape
        with_layout = isinstance(like, Shape) and (like.layout is not None or like.rank == 0)
        dims = tuple(dims)
        return Shape(dtype, dims, Layout.default(len(dims)) if with_layout and dims else None)

    def new(self, opcode: Opcode, shape: ShapeLike, operands=(), attrs=(), literal: Literal | None = None
            ) -> HloInstruction:
        """Stage a new instruction (named after the current one, carrying its metadata).

        ``operands`` are instructions or names; ``attrs`` a mapping or (key, value) pairs."""
        names = tuple(o if isinstance(o, str) else o.name for o in operands)
        items = list(attrs.items()) if isinstance(attrs, dict) else list(attrs)
        metadata = self.current.metadata
        if metadata is not None:
            items.append(("metadata", metadata))
        inst = HloInstruction(self._fresh_name(), opcode, shape, names, Attrs(items), literal=literal)
        self.staged.append(inst)
        return inst

    def constant(self, value, dtype: PrimitiveType) -> HloInstruction:
        """A staged scalar constant."""
        with np.errstate(all="ignore"):
            arr = np.array(value).astype(dtype.numpy)
        shape = Shape(dtype, ())
        return self.new(Opcode.CONSTANT, shape, literal=Literal(shape, arr))

    def splat(self, value, shape: Shape) -> HloInstruction:
        """``value`` in every element of ``shape``: a scalar constant, broadcast unless ``shape`` is a scalar."""
        scalar = self.constant(value, shape.dtype)
        if shape.rank == 0:
            return scalar
        return self.new(Opcode.BROADCAST, shape, [scalar], {"dimensions": ()})

    def reshape(self, operand: HloInstruction, shape: Shape) -> HloInstruction | str:
        """``operand`` reshaped to ``shape`` (the operand itself, by name, if it already has it)."""
        if operand.shape == shape:
            return operand.name
        return self.new(Opcode.RESHAPE, shape, [operand])

    def _fresh_name(self) -> str:
        taken = {i.name for i in self.staged}
        while True:
            name = self.editor.fresh_name(self.current.name)
            if name not in taken:
                return name

    # --- driver side ----------------------------------------------------------------
    def begin(self, inst: HloInstruction) -> None:
        self._current = inst
        self.staged = []

    def commit(self, inst: HloInstruction, result: HloInstruction | str) -> list[str]:
        """Apply a checked replacement of ``inst``; returns the names of the instructions added."""
        editor, users = self.editor, self._users
        if isinstance(result, str):
            for u in list(users[inst.name]):
                user = editor[u]
                editor.set(user.replace(operands=tuple(result if o == inst.name else o for o in user.operands)))
                users[result][u] = None
            users[inst.name].clear()
            if editor.root == inst.name:
                editor.root = result
                editor.changed = True
            return []
        by_name = {s.name: s for s in self.staged}
        needed: set[str] = set()
        work = list(result.operands)
        while work:  # only the helpers the replacement uses
            n = work.pop()
            if n in by_name and n not in needed:
                needed.add(n)
                work.extend(by_name[n].operands)
        added = [s for s in self.staged if s.name in needed]
        for helper in added:
            editor.add(helper)
            users[helper.name] = {}
            for o in helper.operands:
                users[o][helper.name] = None
        new = result.replace(name=inst.name)
        for o in inst.operands:
            users[o].pop(inst.name, None)
        for o in new.operands:
            users[o][inst.name] = None
        editor.set(new)
        return [h.name for h in added]

    def check(self, inst: HloInstruction, result: HloInstruction | str, rule_name: str) -> None:
        """Raise ``RuleError`` unless ``result`` is a well-formed replacement of ``inst``."""
        def fail(why: str) -> RuleError:
            return RuleError(f"algsimp rule {rule_name} on %{inst.name}: {why}")

        if isinstance(result, str):
            if result not in self.editor:
                raise fail(f"replacement %{result} does not exist")
            if result == inst.name:
                raise fail("replaced an instruction with itself")
            shape = self.editor[result].shape
        else:
            if result not in self.staged:
                raise fail("a new replacement must be built with ctx.new")
            shape = result.shape
        if shape != inst.shape:
            raise fail(f"replacement shape {shape} differs from {inst.shape}")
        shapes: dict[str, ShapeLike] = {}  # staged instruction -> its declared shape
        for new in self.staged:
            if inst.name in new.operands:
                raise fail(f"new %{new.name} uses the instruction it replaces")
            if isinstance(result, HloInstruction) and result.name in new.operands:
                raise fail(f"new %{new.name} uses the replacement itself")
            operand_shapes = [shapes[o] if o in shapes else self.editor[o].shape for o in new.operands]
            ctx = ShapeContext(new.opcode, operand_shapes, new.attrs, declared=new.shape, called=self.signatures,
                               literal=new.literal)
            try:
                inferred = infer_shape(ctx)
            except ShapeError as e:
                raise fail(f"new {new.opcode.text} is ill-formed: {e}") from e
            if not inferred.compatible(new.shape):
                raise fail(f"new {new.opcode.text} declares {new.shape}, inference gives {inferred}")
            shapes[new.name] = new.shape

