"""The ``RowPrograms`` pass: runs of consecutive row-wise instructions the CUDA backend emits as one
kernel with a block per row (softmax, layer norm and other normalizations).

After fusion a softmax is four kernels (max, ``exp(x - max)``, sum, divide)
and a layer norm three, each a pass over ``[R, K]`` in memory. A run of
consecutive instructions of a scheduled computation that all work row by row
on the same ``[R, K]`` (row reductions over the last dim producing ``[R]``,
possibly with an elementwise epilogue, and elementwise fusions producing
``[R, K]`` or ``[R]``) is annotated ``row_program={group=N,...}`` member by
member; ``backends/cuda/kernel_rows.py`` emits each group as one kernel (a
reduction's result is a shared scalar, an ``[R, K]`` value used later in the
group a shared row, only values used outside the group are written out).

A group starts at a row reduction with ``MIN_K <= K <= MAX_K``, holds two
reductions or a reduction and an ``[R, K]`` result, and the rows it keeps
fit in ``MAX_SHARED_BYTES``. Parameters and constants do not break a run.
Valid IR in, valid IR out: only the annotation changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.annotations import ROW_PROGRAM, RowProgram, RowRole
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Group, Opcode
from hlo.passes.annotate import annotate
from hlo.passes.fusion import scheduled_computations
from hlo.shapes import Shape

MAX_SHARED_BYTES = 40 * 1024
MIN_K, MAX_K = 256, 16384
_NOT_ROW_WISE = Group.CONTRACTIONS | Group.CONTROL_FLOW | {
    Opcode.REDUCE_WINDOW, Opcode.SORT, Opcode.SCATTER, Opcode.GATHER, Opcode.CUSTOM_CALL, Opcode.SELECT_AND_SCATTER,
    Opcode.TOPK, Opcode.RNG, Opcode.FUSION}


@dataclass(frozen=True)
class _Member:
    inst: HloInstruction
    role: RowRole
    dims: tuple[int, ...]  # of its result: [R, K] or [R]
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


def classify(module: HloModule, comp: HloComputation, inst: HloInstruction) -> tuple[_Member, tuple[int, int] | None] | None:
    """The member ``inst`` would be and, for a reduction, its ``(R, K)``; None when it cannot join."""
    shape = inst.shape
    if not isinstance(shape, Shape) or shape.dtype is not P.F32 or not _row_major(shape) or shape.rank not in (1, 2):
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
        return (_Member(inst, RowRole.FULL if shape.rank == 2 else RowRole.ROW, shape.dims), None)
    root = fused.root if fused is not None else inst
    red = root if root.opcode is Opcode.REDUCE else (epilogue_reduce(fused) if fused is not None else None)
    if red is None or len(reduces) != 1 or len(red.operands) != 2 or tuple(red.attr("dimensions")) != (1,):
        return None
    src = (fused or comp)[red.operands[0]].shape
    if not isinstance(src, Shape) or src.rank != 2 or not _row_major(src) or shape.rank != 1:
        return None
    return (_Member(inst, RowRole.REDUCE, shape.dims, red.name), (src.dims[0], src.dims[1]))


def row_groups(module: HloModule, comp: HloComputation) -> list[tuple[tuple[int, int], list[_Member]]]:
    """Maximal runs of consecutive instructions of ``comp`` that form a row program worth one kernel
    (see the module docstring), each with its ``(R, K)``."""
    users = comp.users()
    groups: list[tuple[tuple[int, int], list[_Member]]] = []
    current: list[_Member] = []
    rk: tuple[int, int] = (0, 0)

    def close() -> None:
        group = list(current)
        while group and _shared_rows(group, users) * rk[1] * 4 > MAX_SHARED_BYTES:
            group.pop()  # the kept rows do not fit: stop the program earlier
        reductions = sum(m.role is RowRole.REDUCE for m in group)
        if len(group) >= 2 and (reductions >= 2 or any(m.role is RowRole.FULL for m in group)):
            groups.append((rk, group))
        current.clear()

    def start(c) -> None:
        nonlocal rk
        if c is not None and c[0].role is RowRole.REDUCE and MIN_K <= c[1][1] <= MAX_K:
            rk = c[1]
            current.append(c[0])

    for inst in comp.instructions:
        if inst.opcode in (Opcode.PARAMETER, Opcode.CONSTANT):
            continue  # not scheduled work: they do not break a run
        c = classify(module, comp, inst)
        if not current:
            start(c)
            continue
        if c is not None and ((c[1] == rk) if c[0].role is RowRole.REDUCE else c[0].dims in (rk, rk[:1])):
            current.append(c[0])
        else:
            close()
            start(c)
    if current:
        close()
    return groups


def _shared_rows(group: list[_Member], users) -> int:
    names = {m.inst.name for m in group}
    return sum(1 for m in group if m.role is RowRole.FULL and any(u in names for u in users.get(m.inst.name, [])))


def _decide(module: HloModule, comp: HloComputation) -> dict[str, object]:
    out: dict[str, object] = {}
    for g, ((rows, cols), group) in enumerate(row_groups(module, comp)):
        for m in group:
            out[m.inst.name] = RowProgram(g, m.role, rows, cols, m.reduce)
    return out


@dataclass(frozen=True)
class RowPrograms:
    """Annotates the row programs of every scheduled computation (``row_program=``)."""

    name: str = "row-programs"

    def run(self, module: HloModule) -> HloModule:
        return annotate(module, ROW_PROGRAM, _decide, scheduled_computations(module))
