"""The HLO IR: instructions, computations and modules, all immutable.

An instruction names its operands (other instructions of the same computation)
and called computations by name. A computation is an ordered tuple of
instructions with exactly one ROOT; a module is an ordered tuple of
computations (callees before callers, as XLA prints them) with one ENTRY.
Passes build new objects instead of mutating; ``replace`` helpers make that cheap.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Iterator

from hlo.attributes import Attrs, CompRef, OpMetadata, ProgramShape
from hlo.literal import Literal
from hlo.opcodes import CALLED_COMPUTATION_ATTRS, Opcode
from hlo.shapes import ShapeLike


@dataclass(frozen=True)
class HloInstruction:
    name: str
    opcode: Opcode
    shape: ShapeLike
    operands: tuple[str, ...] = ()
    attrs: Attrs = field(default_factory=Attrs)
    parameter_number: int | None = None  # only for ``parameter``
    literal: Literal | None = None  # only for ``constant``

    def __post_init__(self) -> None:
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        object.__setattr__(self, "operands", tuple(self.operands))

    @property
    def parameter_index(self) -> int:
        """``parameter_number`` of a parameter (the verifier gives every parameter one)."""
        if self.parameter_number is None:
            raise ValueError(f"%{self.name} ({self.opcode.text}) has no parameter number")
        return self.parameter_number

    @property
    def metadata(self) -> OpMetadata | None:
        return self.attrs.get("metadata")

    def attr(self, key: str, default=None):
        return self.attrs.get(key, default)

    @property
    def called_computations(self) -> tuple[str, ...]:
        """Names of the computations this instruction calls, in attribute order."""
        names: list[str] = []
        for key, value in self.attrs.items():
            if key in CALLED_COMPUTATION_ATTRS:
                refs = value if isinstance(value, tuple) else (value,)
                names.extend(r.name for r in refs if isinstance(r, CompRef))
        return tuple(names)

    def replace(self, **changes) -> "HloInstruction":
        return dataclasses.replace(self, **changes)

    def with_attr(self, key: str, value) -> "HloInstruction":
        return dataclasses.replace(self, attrs=self.attrs.set(key, value))


@dataclass(frozen=True)
class HloComputation:
    name: str
    instructions: tuple[HloInstruction, ...]
    root_name: str
    attrs: Attrs = field(default_factory=Attrs)  # e.g. execution_thread

    def __post_init__(self) -> None:
        object.__setattr__(self, "instructions", tuple(self.instructions))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))

    @cached_property
    def by_name(self) -> dict[str, HloInstruction]:
        return {i.name: i for i in self.instructions}

    def __getitem__(self, name: str) -> HloInstruction:
        return self.by_name[name]

    def __iter__(self) -> Iterator[HloInstruction]:
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    @property
    def root(self) -> HloInstruction:
        return self.by_name[self.root_name]

    @cached_property
    def parameters(self) -> tuple[HloInstruction, ...]:
        """Parameter instructions ordered by parameter number (any without one last, for the verifier)."""
        params = [i for i in self.instructions if i.opcode is Opcode.PARAMETER]
        return tuple(sorted(params, key=lambda p: (p.parameter_number is None, p.parameter_number or 0)))

    @property
    def program_shape(self) -> ProgramShape:
        return ProgramShape(tuple(p.shape for p in self.parameters), self.root.shape)

    def users(self) -> dict[str, list[str]]:
        """Instruction name -> names of the instructions using it (in order, with repeats)."""
        result: dict[str, list[str]] = {i.name: [] for i in self.instructions}
        for inst in self.instructions:
            for op in inst.operands:
                result.setdefault(op, []).append(inst.name)
        return result

    def replace(self, **changes) -> "HloComputation":
        return dataclasses.replace(self, **changes)

    # Equality compares structure only; cached properties are not fields.
    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class HloModule:
    name: str
    computations: tuple[HloComputation, ...]
    entry_name: str
    attrs: Attrs = field(default_factory=Attrs)  # header: entry_computation_layout, is_scheduled, ...

    def __post_init__(self) -> None:
        object.__setattr__(self, "computations", tuple(self.computations))
        if not isinstance(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        # An entry layout equal to the entry's own signature is implied: store it only when it differs,
        # so modules compare equal however they were made.
        layout = self.attrs.get("entry_computation_layout")
        if layout is not None and self._derived_layout() == layout:
            object.__setattr__(self, "attrs", self.attrs.remove("entry_computation_layout"))

    def _derived_layout(self) -> ProgramShape | None:
        entry = self.by_name.get(self.entry_name)
        if entry is None or entry.root_name not in entry.by_name:
            return None
        if any(p.parameter_number is None for p in entry.parameters):
            return None
        return entry.program_shape

    @cached_property
    def by_name(self) -> dict[str, HloComputation]:
        return {c.name: c for c in self.computations}

    def computation(self, name: str) -> HloComputation:
        return self.by_name[name]

    @property
    def entry(self) -> HloComputation:
        return self.by_name[self.entry_name]

    @property
    def entry_layout(self) -> ProgramShape:
        layout = self.attrs.get("entry_computation_layout")
        return layout if isinstance(layout, ProgramShape) else self.entry.program_shape

    def replace(self, **changes) -> "HloModule":
        return dataclasses.replace(self, **changes)

    def with_computation(self, comp: HloComputation) -> "HloModule":
        """A copy with the computation of the same name replaced."""
        return self.replace(computations=tuple(comp if c.name == comp.name else c for c in self.computations))

    def instructions(self) -> Iterable[tuple[HloComputation, HloInstruction]]:
        for comp in self.computations:
            for inst in comp.instructions:
                yield comp, inst

    def to_text(self, print_operand_shapes: bool = True, print_metadata: bool = True) -> str:
        from hlo.text.printer import print_module

        return print_module(self, print_operand_shapes=print_operand_shapes, print_metadata=print_metadata)

    def __str__(self) -> str:
        return self.to_text()

    __hash__ = None  # type: ignore[assignment]
