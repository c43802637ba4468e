"""Buffer assignment for one computation: liveness over its schedule and a scratch arena with reuse.

The schedule is the computation's instruction order. A value's buffer is live
from the instruction that defines it to the last instruction that reads it,
directly or through an alias (``tuple``, ``get-tuple-element``, and the
buffers of a while loop's state). ``Arena`` hands out 64-byte aligned,
first-fit offsets and takes buffers back when they die, so the arena's size
is the peak of live bytes (plus fragmentation), not their sum. An
elementwise instruction may write in place into an operand's buffer when that
operand dies there and has the same bytes (it is read only at the index being
written). A dynamic-update-slice (or a loop fusion whose root is one, updating a parameter used
nowhere else) may take its operand's buffer the same way: it then writes only the update region
(``in_place_update``). ``Arena.report()`` renders the assignment like XLA's ``buffer-assignment`` dump.

While loops: ``loop_state_aliases`` says which elements of a while body's state the body may write
into its parameter's buffer (the caller then passes the same buffer as parameter and result, and
copies nothing back): an element passed through unchanged, or updated in place by a
dynamic-update-slice that is the last reader of the parameter element (XLA's copy insertion,
simplified: a value needed after its update keeps its copy).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Group, Opcode
from hlo.shapes import Layout, Shape, TupleShape

ALIGNMENT = 64
_ALIAS_OPS = Group.TUPLE_PLUMBING


# Set while a kernel is generated as a probe for symbolic dims: every allocation gets a fresh slot whose offset
# the kernel computes at run time (``backends.codegen.symbolic.Slots``) and the arena stays 0 bytes; None:
# ordinary first-fit offsets.
PROBE_SLOTS: ContextVar = ContextVar("tfxla_probe_slots", default=None)


def _aligned(n: int) -> int:
    return -(-max(n, 1) // ALIGNMENT) * ALIGNMENT


@dataclass
class Allocation:
    label: str
    offset: int
    size: int
    start: int  # schedule index where it is defined
    end: int | None = None  # schedule index of its last use (None: until the computation returns)
    in_place_of: str | None = None


@dataclass
class Arena:
    """First-fit allocator over a growing arena; records every allocation for the report."""

    free: list[tuple[int, int]] = field(default_factory=list)  # (offset, size), sorted by offset
    size: int = 0
    allocations: list[Allocation] = field(default_factory=list)
    live: dict[str, Allocation] = field(default_factory=dict)

    def allocate(self, label: str, nbytes: int, step: int) -> int:
        slots = PROBE_SLOTS.get()
        if slots is not None:  # symbolic probe (``backends/codegen/symbolic.py``): a slot of its own, no reuse
            return self._record(label, slots.new(nbytes), _aligned(nbytes), step)
        need = _aligned(nbytes)
        for k, (off, size) in enumerate(self.free):
            if size >= need:
                if size == need:
                    del self.free[k]
                else:
                    self.free[k] = (off + need, size - need)
                return self._record(label, off, need, step)
        # Grow: reuse a free block at the end of the arena if there is one.
        if self.free and self.free[-1][0] + self.free[-1][1] == self.size:
            off, size = self.free.pop()
            self.size = off + need
            return self._record(label, off, need, step)
        off = self.size
        self.size += need
        return self._record(label, off, need, step)

    def _record(self, label: str, offset: int, size: int, step: int) -> int:
        alloc = Allocation(label, offset, size, step)
        self.allocations.append(alloc)
        self.live[label] = alloc
        return offset

    def share(self, label: str, owner: str, step: int) -> int:
        """``label`` writes in place into ``owner``'s buffer (which dies at ``step``)."""
        src = self.live.pop(owner)
        src.end = step
        alloc = Allocation(label, src.offset, src.size, step, in_place_of=owner)
        self.allocations.append(alloc)
        self.live[label] = alloc
        return src.offset

    def release(self, label: str, step: int) -> None:
        alloc = self.live.pop(label, None)
        if alloc is None:
            return
        alloc.end = step
        if PROBE_SLOTS.get() is not None:
            return  # a probe's slots are never reused
        self.free.append((alloc.offset, alloc.size))
        self.free.sort()
        merged: list[tuple[int, int]] = []
        for off, size in self.free:  # coalesce neighbours
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + size)
            else:
                merged.append((off, size))
        self.free = merged

    def report(self, title: str) -> str:
        lines = [f"computation {title}: scratch arena {self.size} bytes, {len(self.allocations)} buffers"]
        for a in sorted(self.allocations, key=lambda a: (a.offset, a.start)):
            end = "end" if a.end is None else str(a.end)
            note = f", in place of {a.in_place_of}" if a.in_place_of else ""
            lines.append(f" value: <{a.label}> (size={a.size},offset={a.offset}): live [{a.start}, {end}]{note}")
        return "\n".join(lines)


def is_view(comp: HloComputation, inst: HloInstruction) -> bool:
    """A reshape (or bitcast) that is only a new view of its operand's bytes: same element type and
    row-major layouts on both sides, so the result aliases the operand's buffer instead of a copy."""
    if inst.opcode not in Group.VIEW or inst.operands[0] not in comp.by_name:
        return False
    src, out = comp[inst.operands[0]].shape, inst.shape
    if not (isinstance(src, Shape) and isinstance(out, Shape)) or src.dtype != out.dtype:
        return False
    return all(s.layout is None or s.layout == Layout.default(s.rank) for s in (src, out)) and \
        src.num_elements == out.num_elements and src.dtype.is_array_type


def buffer_sources(comp: HloComputation) -> dict[str, set[str]]:
    """Instruction -> the buffer-owning instructions its value may refer to (itself, unless it is a
    tuple, get-tuple-element or view of other values)."""
    sources: dict[str, set[str]] = {}
    for inst in comp.instructions:
        if inst.opcode in _ALIAS_OPS or is_view(comp, inst):
            sources[inst.name] = set().union(*(sources.get(o, {o}) for o in inst.operands)) if inst.operands else set()
        else:
            sources[inst.name] = {inst.name}
    return sources


def last_uses(comp: HloComputation) -> dict[str, int]:
    """Instruction -> schedule index of the last instruction reading it (through aliases too)."""
    index = {inst.name: i for i, inst in enumerate(comp.instructions)}
    sources = buffer_sources(comp)
    last = {inst.name: index[inst.name] for inst in comp.instructions}
    for inst in comp.instructions:
        for op in inst.operands:
            for owner in sources.get(op, {op}):
                last[owner] = max(last.get(owner, 0), index[inst.name])
    for owner in sources.get(comp.root_name, {comp.root_name}):
        last[owner] = len(comp.instructions)  # results outlive the body
    return last


def element_last_uses(comp: HloComputation) -> dict[tuple[str, int], int]:
    """(owner, k) -> schedule index of the last instruction reading element ``k`` of the tuple-shaped
    buffer owner ``owner`` (through get-tuple-element, tuples and views; a reader of the whole tuple
    reads every element), for owners whose elements are arrays: ``last_uses`` per element, so one
    element may die while another is still read."""
    index = {inst.name: i for i, inst in enumerate(comp.instructions)}
    parts: dict[str, set[tuple[str, int | None]]] = {}  # value -> (owner, element or None: all)
    for inst in comp.instructions:
        op = inst.opcode
        if op is Opcode.GET_TUPLE_ELEMENT:
            src, k = comp[inst.operands[0]], inst.attr("index")
            if src.opcode is Opcode.TUPLE:
                parts[inst.name] = parts[src.operands[k]]
            else:
                parts[inst.name] = {(o, k) if e is None and o == src.name else (o, e) for o, e in parts[src.name]}
        elif op is Opcode.TUPLE or is_view(comp, inst):
            parts[inst.name] = set().union(*(parts[o] for o in inst.operands)) if inst.operands else set()
        else:
            parts[inst.name] = {(inst.name, None)}
    last: dict[tuple[str, int], int] = {}
    whole: dict[str, int] = {}

    def read(name: str, step: int) -> None:
        for owner, k in parts.get(name, ()):
            if k is None:
                whole[owner] = max(whole.get(owner, -1), step)
            else:
                last[(owner, k)] = max(last.get((owner, k), -1), step)

    for inst in comp.instructions:
        for o in inst.operands:
            read(o, index[inst.name])
    read(comp.root_name, len(comp.instructions))
    out: dict[tuple[str, int], int] = {}
    for inst in comp.instructions:
        if isinstance(inst.shape, TupleShape):
            for k in range(len(inst.shape.elements)):
                out[(inst.name, k)] = max(whole.get(inst.name, -1), last.get((inst.name, k), -1))
    return out


def can_write_in_place(module: HloModule, comp: HloComputation, inst: HloInstruction, operand: str) -> bool:
    """Whether ``inst`` reads ``operand`` only at the index it writes (so it may overwrite it)."""
    out, src = inst.shape, comp[operand].shape
    if not (isinstance(out, Shape) and isinstance(src, Shape)) or out.dims != src.dims or \
            out.byte_size != src.byte_size or out.layout != src.layout:
        return False
    position = in_place_update(module, inst)
    if position is not None:
        return inst.operands[position] == operand and _alone(comp, inst, position)
    if inst.opcode.is_elementwise:
        return True
    if inst.opcode is not Opcode.FUSION:
        return False
    fused = module.computation(inst.attr("calls").name)
    # Library kernels (oneDNN matmul/convolution) write their output before the epilogue reads the
    # other operands, and reductions read many elements: only plain loop fusions qualify.
    if any(i.opcode in Group.CONTRACTIONS or i.opcode in (Opcode.REDUCE, Opcode.REDUCE_WINDOW)
           for i in fused.instructions):
        return False
    positions = [k for k, o in enumerate(inst.operands) if o == operand]
    params = {p.name for p in fused.parameters if p.parameter_number in positions}
    users = fused.users()
    # Every instruction on every path from the parameter to the root must be elementwise at the output's
    # dims: one that moves elements (a transpose, reverse, slice) after an elementwise one reads the
    # parameter at another index than it writes (softmax then a transpose was overwritten mid-read).
    seen, todo = set(params), list(params)
    while todo:
        for u in users.get(todo.pop(), []):
            user = fused[u]
            if not (user.opcode.is_elementwise and isinstance(user.shape, Shape) and user.shape.dims == out.dims):
                return False
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return True


def in_place_update(module: HloModule, inst: HloInstruction) -> int | None:
    """The operand position whose buffer ``inst`` may update in place, writing only an update region:
    0 for a dynamic-update-slice; for a fusion whose root is a dynamic-update-slice of a fused
    parameter that nothing else in the fusion reads (and no dot, convolution or reduce), that
    parameter's operand position. None otherwise. Whether the buffer may be shared is the caller's
    question (``can_write_in_place``, ``loop_state_aliases``)."""
    if inst.opcode is Opcode.DYNAMIC_UPDATE_SLICE:
        return 0
    if inst.opcode is not Opcode.FUSION:
        return None
    fused = module.computation(inst.attr("calls").name)
    root = fused.root
    if root.opcode is not Opcode.DYNAMIC_UPDATE_SLICE or any(
            i.opcode in Group.CONTRACTIONS or i.opcode in (Opcode.REDUCE, Opcode.REDUCE_WINDOW)
            for i in fused.instructions):
        return None
    param = fused[root.operands[0]]
    if param.opcode is not Opcode.PARAMETER or fused.users()[param.name] != [root.name] or \
            root.operands.count(param.name) != 1:
        return None
    position = param.parameter_number
    if position is None or inst.operands.count(inst.operands[position]) != 1:
        return None
    return position


def _alone(comp: HloComputation, inst: HloInstruction, position: int) -> bool:
    """Whether no operand of ``inst`` but the one at ``position`` may refer to that one's buffers."""
    sources = buffer_sources(comp)
    mine = sources.get(inst.operands[position], {inst.operands[position]})
    return all(not (sources.get(o, {o}) & mine) for k, o in enumerate(inst.operands) if k != position)


def _state_elements(comp: HloComputation) -> dict[str, set[int]]:
    """Instruction -> the elements of the computation's (one, tuple) parameter its value may refer to."""
    param = comp.parameters[0]
    assert isinstance(param.shape, TupleShape), "a while body's state is one tuple parameter"
    elements: dict[str, set[int]] = {param.name: set(range(len(param.shape.elements)))}
    for inst in comp.instructions:
        if inst.opcode is Opcode.GET_TUPLE_ELEMENT and inst.operands[0] == param.name:
            elements[inst.name] = {inst.attr("index")}
        elif inst.opcode in _ALIAS_OPS or is_view(comp, inst):
            elements[inst.name] = set().union(*(elements.get(o, set()) for o in inst.operands))
    return elements


def loop_state_aliases(module: HloModule, body: HloComputation) -> frozenset[int]:
    """The elements ``k`` of a while body's state whose result the body may write into parameter element
    ``k``'s own buffer (the body emits correct code whether or not the caller passes the same buffer).

    Element ``k`` qualifies when the body's root tuple names its result once and that result is either
    ``get-tuple-element(param, k)`` itself (passed through), or an in-place update
    (``in_place_update``) of a value referring to element ``k`` alone, after which nothing reads
    element ``k`` (the root's other results included), and which reads it through no other operand."""
    if len(body.parameters) != 1:
        return frozenset()
    param, root = body.parameters[0], body.root
    if not isinstance(param.shape, TupleShape) or root.opcode is not Opcode.TUPLE or \
            any(isinstance(e, TupleShape) for e in param.shape.elements):
        return frozenset()
    elements = _state_elements(body)
    index = {inst.name: i for i, inst in enumerate(body.instructions)}
    last_read: dict[int, int] = {}  # element -> schedule index of its last reader
    for inst in body.instructions:
        step = len(body.instructions) if inst is root else index[inst.name]
        for op in inst.operands:
            for k in elements.get(op, ()):
                last_read[k] = max(last_read.get(k, -1), step)
    aliased = set()
    for k, name in enumerate(root.operands):
        if root.operands.count(name) != 1:
            continue
        writer = body[name]
        if writer.opcode is Opcode.GET_TUPLE_ELEMENT and writer.operands[0] == param.name:
            if writer.attr("index") == k:
                aliased.add(k)
            continue
        position = in_place_update(module, writer)
        if position is None or elements.get(writer.operands[position]) != {k} or last_read.get(k) != index[name]:
            continue
        if all(k not in elements.get(o, ()) for j, o in enumerate(writer.operands) if j != position):
            aliased.add(k)
    return frozenset(aliased)
