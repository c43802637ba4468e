"""A small builder for constructing HLO computations and modules in Python.

    b = ComputationBuilder("add")
    x, y = b.parameter(scalar("f32")), b.parameter(scalar("f32"))
    add = b.build(b.add(x, y))
    e = ComputationBuilder("main")
    p = e.parameter(Shape.array("f32", [4, 5]))
    r = e.reduce(p, e.constant(0.0, "f32"), dimensions=(1,), to_apply=add)
    module = module_of("m", e.build(r))

Every opcode is a method named after its text (``exponential_minus_one``,
``get_tuple_element``); keyword arguments become attributes in the given
order. The result shape comes from shape inference unless ``shape=`` is
given (needed for reshape, broadcast, convert, iota, ...). Names are
``<opcode>.<n>``, numbered per builder, so output is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from hlo.attributes import Attrs, CompRef, OpMetadata
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.literal import Literal
from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, infer_shape
from hlo.shapes import Shape, ShapeLike


@dataclass(frozen=True)
class Value:
    """A handle to an instruction being built."""

    name: str
    shape: ShapeLike


class ComputationBuilder:
    def __init__(self, name: str):
        self.name = name
        self._insts: list[HloInstruction] = []
        self._shapes: dict[str, ShapeLike] = {}
        self._called: dict[str, HloComputation] = {}
        self._counter = 0
        self._nparams = 0
        self.metadata: OpMetadata | None = None  # attached to every instruction added while set
        self.name_hint: str | None = None  # base of instruction names while set (e.g. the TF node name)

    # --- core ---------------------------------------------------------------
    def _fresh(self, base: str) -> str:
        self._counter += 1
        return f"{self.name_hint or base}.{self._counter}"

    @property
    def instructions(self) -> tuple[HloInstruction, ...]:
        return tuple(self._insts)

    def shape_of(self, name: str) -> ShapeLike:
        return self._shapes[name]

    def _add(self, inst: HloInstruction) -> Value:
        self._insts.append(inst)
        self._shapes[inst.name] = inst.shape
        return Value(inst.name, inst.shape)

    def op(self, opcode: Opcode, *operands: Value, shape: ShapeLike | None = None, name: str | None = None,
           **attrs) -> Value:
        """Add any instruction; computations passed as attributes are recorded as callees."""
        converted = []
        for key, value in attrs.items():
            key = key.replace("control_predecessors", "control-predecessors")
            converted.append((key, self._attr(value)))
        if self.metadata is not None and "metadata" not in attrs:
            converted.append(("metadata", self.metadata))
        attrs_t = Attrs(converted)
        ctx = ShapeContext(opcode, [o.shape for o in operands], attrs_t, declared=shape,
                           called={n: c.program_shape for n, c in self._called.items()})
        result = infer_shape(ctx)
        inst = HloInstruction(name or self._fresh(opcode.text), opcode, shape or result,
                              tuple(o.name for o in operands), attrs_t)
        return self._add(inst)

    def _attr(self, value):
        if isinstance(value, HloComputation):
            self._called[value.name] = value
            return CompRef(value.name)
        if isinstance(value, (list, tuple)) and value and all(isinstance(v, HloComputation) for v in value):
            return tuple(self._attr(v) for v in value)
        if isinstance(value, list):
            return tuple(value)
        return value

    def __getattr__(self, attr: str) -> Callable[..., Value]:
        try:
            opcode = Opcode.from_text(attr.rstrip("_").replace("_", "-"))
        except ValueError:
            raise AttributeError(f"{type(self).__name__} has no opcode or method {attr!r}") from None
        return lambda *operands, **kw: self.op(opcode, *operands, **kw)

    # --- leaves -----------------------------------------------------------
    def parameter(self, shape: ShapeLike, name: str | None = None) -> Value:
        number = self._nparams
        self._nparams += 1
        attrs = Attrs([("metadata", self.metadata)] if self.metadata is not None else [])
        return self._add(HloInstruction(name or f"p{number}", Opcode.PARAMETER, shape, (), attrs,
                                        parameter_number=number))

    def constant(self, value, dtype: PrimitiveType | str | None = None, name: str | None = None) -> Value:
        if isinstance(dtype, str):
            dtype = PrimitiveType.from_text(dtype)
        arr = np.asarray(value)
        if dtype is None:
            dtype = PrimitiveType.from_numpy(arr.dtype)
        lit = Literal(Shape.array(dtype, arr.shape), arr.astype(dtype.numpy))
        attrs = Attrs([("metadata", self.metadata)] if self.metadata is not None else [])
        return self._add(HloInstruction(name or self._fresh("constant"), Opcode.CONSTANT, lit.shape, (), attrs,
                                        literal=lit))

    # --- result -----------------------------------------------------------
    def build(self, root: Value) -> HloComputation:
        return HloComputation(self.name, tuple(self._insts), root.name)

    @property
    def callees(self) -> dict[str, HloComputation]:
        return dict(self._called)


def module_of(name: str, entry: HloComputation, *builders_or_comps) -> HloModule:
    """A module whose ENTRY is ``entry``; called computations are gathered from the builders given
    (or passed directly) and ordered callees-first."""
    pool: dict[str, HloComputation] = {}
    for item in builders_or_comps:
        if isinstance(item, ComputationBuilder):
            pool.update(item.callees)
        else:
            pool[item.name] = item
    ordered: list[HloComputation] = []

    def visit(comp: HloComputation) -> None:
        for inst in comp.instructions:
            for callee in inst.called_computations:
                if callee in pool and pool[callee] not in ordered:
                    visit(pool[callee])
        if comp not in ordered:
            ordered.append(comp)

    visit(entry)
    return HloModule(name, tuple(ordered), entry.name)
