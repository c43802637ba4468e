"""Verifier checks of the kernel-shape annotations (``hlo/annotations.py``).

``check_annotations(module, comp, error)`` runs after the structural checks of
``comp``. Per instruction, one small check per annotation key (``CHECKS``);
per computation, that the members of each row program are consecutive in the
schedule (parameters and constants aside) and agree on ``rows``/``cols``.
"""

from __future__ import annotations

import math
from typing import Callable

from hlo.annotations import COLUMN_REDUCE, POST_OPS, ROW_PROGRAM, PostOpChain, RowProgram, RowRole
from hlo.attributes import FusionKind
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape


def _fused(module: HloModule, inst: HloInstruction) -> HloComputation | None:
    ref = inst.attr("calls") if inst.opcode is Opcode.FUSION else None
    return module.by_name.get(ref.name) if ref is not None and hasattr(ref, "name") else None


def _row_program(module: HloModule, comp: HloComputation, inst: HloInstruction, value) -> str | None:
    if not isinstance(value, RowProgram):
        return f"row_program is not a row program: {value}"
    shape = inst.shape
    full = value.role is RowRole.FULL
    if not isinstance(shape, Shape) or shape.dtype is not PrimitiveType.F32 or not _rows_of(shape, value, full):
        want = f"[{value.rows}, {value.cols}]" if full else f"[{value.rows}]"
        return f"row_program {value.role.value} member must be f32{want}, not {shape}"
    if value.role is not RowRole.REDUCE:
        return None if value.reduce is None else "row_program: only a reduce member names a reduce"
    body = _fused(module, inst) or comp
    red = body.by_name.get(value.reduce) if value.reduce is not None else None
    if red is None or red.opcode is not Opcode.REDUCE or (body is comp and red is not inst):
        return f"row_program reduce member: %{value.reduce} is not its reduce"
    src = body.by_name[red.operands[0]].shape
    if not isinstance(src, Shape) or tuple(red.attr("dimensions", ())) != (src.rank - 1,) or not _rows_of(src, value, True):
        return f"row_program: %{red.name} does not reduce [{value.rows}, {value.cols}] over its last dim"
    return None


def _rows_of(shape: Shape, value: RowProgram, full: bool) -> bool:
    """``shape`` is ``[..., cols]`` (``full``) or ``[...]`` with ``rows`` elements in the leading dims."""
    dims = shape.dims
    if full:
        return len(dims) >= 2 and dims[-1] == value.cols and math.prod(dims[:-1]) == value.rows
    return len(dims) >= 1 and math.prod(dims) == value.rows


def _post_ops(module: HloModule, comp: HloComputation, inst: HloInstruction, value) -> str | None:
    if not isinstance(value, PostOpChain):
        return f"post_ops is not a post-op chain: {value}"
    fused = _fused(module, inst)
    if fused is None or inst.attr("kind") is not FusionKind.OUTPUT:
        return "post_ops on an instruction that is not an output fusion"
    cut = fused.by_name.get(value.cut)
    if cut is None or not isinstance(cut.shape, Shape):
        return f"post_ops: the cut %{value.cut} is not an array of the fused computation"
    for op in value.ops + (value.fast or ()):
        if op.operand is None:
            continue
        if op.operand not in fused.by_name:
            return f"post_ops: %{op.operand} is not an instruction of the fused computation"
        if len(op.dims) != cut.shape.rank:
            return f"post_ops: {op.alg} of %{op.operand} maps {len(op.dims)} dims, the cut has {cut.shape.rank}"
    return None


def _column_reduce(module: HloModule, comp: HloComputation, inst: HloInstruction, value) -> str | None:
    if value is not True:
        return f"column_reduce must be true, not {value}"
    if inst.opcode is not Opcode.REDUCE or len(inst.operands) != 2:
        return "column_reduce on an instruction that is not a single-output reduce"
    dims = sorted(inst.attr("dimensions", ()))
    src = comp[inst.operands[0]].shape
    rank = src.rank if isinstance(src, Shape) else 0
    if not dims or dims != list(range(len(dims))) or len(dims) == rank:
        return f"column_reduce: dimensions={{{','.join(map(str, dims))}}} are not the leading dims of a rank-{rank} input"
    return None


CHECKS: dict[str, Callable[[HloModule, HloComputation, HloInstruction, object], str | None]] = {
    ROW_PROGRAM: _row_program,
    POST_OPS: _post_ops,
    COLUMN_REDUCE: _column_reduce,
}


def check_annotations(module: HloModule, comp: HloComputation, error) -> None:
    """Raise ``error(message, inst)`` for the first malformed annotation of ``comp``."""
    groups: dict[int, tuple[RowProgram, int]] = {}  # group -> (first member, index of its last member)
    closed: set[int] = set()
    scheduled = [i for i in comp.instructions if i.opcode not in (Opcode.PARAMETER, Opcode.CONSTANT)]
    open_group = None
    for k, inst in enumerate(scheduled):
        for key, check in CHECKS.items():
            if key in inst.attrs:
                message = check(module, comp, inst, inst.attrs[key])
                if message is not None:
                    raise error(message, inst)
        rp = inst.attrs.get(ROW_PROGRAM)
        if open_group is not None and (rp is None or rp.group != open_group):
            closed.add(open_group)
            open_group = None
        if rp is None:
            continue
        if rp.group in closed:
            raise error(f"row_program group {rp.group} is not consecutive in the schedule", inst)
        first = groups.setdefault(rp.group, (rp, k))[0]
        if (first.rows, first.cols) != (rp.rows, rp.cols):
            raise error(f"row_program group {rp.group} mixes [{first.rows}, {first.cols}] and "
                        f"[{rp.rows}, {rp.cols}]", inst)
        open_group = rp.group
