"""Row programs: runs of consecutive row-wise instructions a backend emits as one kernel that walks the
rows once (softmax, layer norm and other normalizations), and the pass that annotates them.

After fusion a softmax is four kernels (max, ``exp(x - max)``, sum, divide) and a layer norm three, each a
pass over ``[..., K]`` in memory. A run of consecutive instructions of a scheduled computation that all
work row by row on the same ``[..., K]`` (row reductions over the last dim producing ``[...]``, possibly
with an elementwise epilogue, and elementwise fusions producing ``[..., K]`` or ``[...]``) is annotated
``row_program={group=N,...}`` member by member (``rows`` is the product of the leading dims, ``cols``
is ``K``); the backend emits each group as one kernel (a reduction's result is a per-row scalar, an
``[..., K]`` value used later in the group a kept row, only values used outside the group are written
out): the CUDA backend a block per row (``backends/cuda/kernel_rows.py``), the CPU backend a loop over
rows split over the caller's threads (``backends/cpu/row_program.py``).

A group starts at a row reduction with ``min_cols <= K <= max_cols`` and at least ``min_rows`` rows,
holds two reductions or a reduction and an ``[..., K]`` result, and the rows it keeps fit in
``max_kept_bytes``; each backend gives its limits (``RowLimits``). Parameters and constants do not break
a run. Valid IR in, valid IR out: only the annotation changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hlo.annotations import ROW_PROGRAM, RowProgram, RowRole
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Group, Opcode
from hlo.passes.annotate import annotate
from hlo.passes.fusion import scheduled_computations
from hlo.shapes import Shape

_NOT_ROW_WISE = Group.CONTRACTIONS | Group.CONTROL_FLOW | {
    Opcode.REDUCE_WINDOW, Opcode.SORT, Opcode.SCATTER, Opcode.GATHER, Opcode.CUSTOM_CALL, Opcode.SELECT_AND_SCATTER,
    Opcode.TOPK, Opcode.RNG, Opcode.FUSION}


@dataclass(frozen=True)
class RowLimits:
    """Which runs a backend makes row programs of: the row length ``K`` (``min_cols``..``max_cols``), the
    bytes of the ``[K]`` rows a group keeps (values read again later in the group), the rank of its
    ``[..., K]`` arrays (``max_rank``) and the number of rows (``min_rows``)."""

    min_cols: int
    max_cols: int
    max_kept_bytes: int
    max_rank: int = 2
    min_rows: int = 1


@dataclass(frozen=True)
class _Member:
    inst: HloInstruction
    role: RowRole
    dims: tuple[int, ...]  # of its result: [..., K] or [...]
    reduce: str | None = None  # for a reduce member: the reduce (the instruction, or inside its fusion)


def _row_major(shape: Shape) -> bool:
    return shape.layout is None or not shape.layout.minor_to_major or \
        tuple(shape.layout.minor_to_major) == tuple(range(shape.rank - 1, -1, -1))


def epilogue_reduce(fused: HloComputation) -> HloInstruction | None:
    """The one single-output reduce of a fused computation whose root is an elementwise function of it
    (every instruction between them elementwise with the reduce's dims)."""
    reduces = [i for i in fused.instructions if i.opcode is Opcode.REDUCE]
    if len(reduces) != 1 or len(reduces[0].operands) != 2:
        return None
    red = reduces[0]
    if not isinstance(red.shape, Shape):
        return None
    dims = red.shape.dims
    users = fused.users()
    seen, todo = set(), [red.name]
    while todo:
        for u in users.get(todo.pop(), []):
            inst = fused[u]
            if not (inst.opcode.is_elementwise and isinstance(inst.shape, Shape) and inst.shape.dims == dims):
                return None
            if u not in seen:
                seen.add(u)
                todo.append(u)
    return red if fused.root_name in seen else None


def classify(module: HloModule, comp: HloComputation, inst: HloInstruction, max_rank: int = 2
             ) -> tuple[_Member, tuple[tuple[int, ...], int] | None] | None:
    """The member ``inst`` would be and, for a reduction, its ``(leading dims, K)``; None when it cannot
    join a row program of arrays of rank at most ``max_rank``."""
    shape = inst.shape
    if not isinstance(shape, Shape) or shape.dtype is not P.F32 or not _row_major(shape) \
            or not 1 <= shape.rank <= max_rank:
        return None
    fused = module.computation(inst.attr("calls").name) if inst.opcode is Opcode.FUSION else None
    if fused is not None:
        body = fused.instructions
    elif inst.opcode.is_elementwise or inst.opcode in (Opcode.REDUCE, Opcode.BROADCAST):
        body = (inst,)
    else:
        return None
    reduces = [i for i in body if i.opcode is Opcode.REDUCE]
    if any(i.opcode in _NOT_ROW_WISE for i in body):
        return None
    if not reduces:
        return (_Member(inst, RowRole.FULL if shape.rank >= 2 else RowRole.ROW, shape.dims), None)
    root = fused.root if fused is not None else inst
    red = root if root.opcode is Opcode.REDUCE else (epilogue_reduce(fused) if fused is not None else None)
    if red is None or len(reduces) != 1 or len(red.operands) != 2:
        return None
    src = (fused or comp)[red.operands[0]].shape
    if not isinstance(src, Shape) or src.rank != shape.rank + 1 or src.rank > max_rank or not _row_major(src) \
            or tuple(red.attr("dimensions")) != (src.rank - 1,):
        return None
    return (_Member(inst, RowRole.REDUCE, shape.dims, red.name), (src.dims[:-1], src.dims[-1]))


def row_groups(module: HloModule, comp: HloComputation, limits: RowLimits
               ) -> list[tuple[tuple[tuple[int, ...], int], list[_Member]]]:
    """Maximal runs of consecutive instructions of ``comp`` that form a row program worth one kernel
    (see the module docstring), each with its ``(leading dims, K)``."""
    users = comp.users()
    groups: list[tuple[tuple[tuple[int, ...], int], list[_Member]]] = []
    current: list[_Member] = []
    lk: tuple[tuple[int, ...], int] = ((), 0)

    def close() -> None:
        group = list(current)
        while group and _shared_rows(group, users) * lk[1] * 4 > limits.max_kept_bytes:
            group.pop()  # the kept rows do not fit: stop the program earlier
        reductions = sum(m.role is RowRole.REDUCE for m in group)
        if len(group) >= 2 and (reductions >= 2 or any(m.role is RowRole.FULL for m in group)):
            groups.append((lk, group))
        current.clear()

    def start(c) -> None:
        nonlocal lk
        if c is not None and c[0].role is RowRole.REDUCE and limits.min_cols <= c[1][1] <= limits.max_cols \
                and math.prod(c[1][0]) >= limits.min_rows:
            lk = c[1]
            current.append(c[0])

    for inst in comp.instructions:
        if inst.opcode in (Opcode.PARAMETER, Opcode.CONSTANT):
            continue  # not scheduled work: they do not break a run
        c = classify(module, comp, inst, limits.max_rank)
        if not current:
            start(c)
            continue
        member = _joining(c, lk)
        if member is not None:
            current.append(member)
        else:
            close()
            start(c)
    if current:
        close()
    return groups


def _joining(c, lk: tuple[tuple[int, ...], int]) -> _Member | None:
    """The member ``c`` (``classify``'s answer) is in a group over ``lk``, its role by its dims; None if none."""
    if c is None:
        return None
    member, red = c
    if member.role is RowRole.REDUCE:
        return member if red == lk else None
    role = {lk[0] + (lk[1],): RowRole.FULL, lk[0]: RowRole.ROW}.get(member.dims)
    return None if role is None else _Member(member.inst, role, member.dims)


def _shared_rows(group: list[_Member], users) -> int:
    names = {m.inst.name for m in group}
    return sum(1 for m in group if m.role is RowRole.FULL and any(u in names for u in users.get(m.inst.name, [])))


@dataclass(frozen=True)
class RowPrograms:
    """Annotates the row programs of every scheduled computation (``row_program=``) within ``limits``."""

    limits: RowLimits
    name: str = "row-programs"

    def _decide(self, module: HloModule, comp: HloComputation) -> dict[str, object]:
        out: dict[str, object] = {}
        for g, ((lead, cols), group) in enumerate(row_groups(module, comp, self.limits)):
            for m in group:
                out[m.inst.name] = RowProgram(g, m.role, math.prod(lead), cols, m.reduce)
        return out

    def run(self, module: HloModule) -> HloModule:
        return annotate(module, ROW_PROGRAM, self._decide, scheduled_computations(module))
