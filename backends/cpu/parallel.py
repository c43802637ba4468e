"""Which loops of a CPU loop nest OpenMP splits, and how much work an instruction does per element.

A nest is split when its work (output elements times ``inner_work``) reaches the code generator's
``parallel_threshold``; ``parallel_loops`` picks the loops to collapse into the parallel for.
"""

from __future__ import annotations

import math

from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape

PARALLEL_CHUNKS = 64  # iterations the split loops of a parallel nest should offer the OpenMP team


def parallel_loops(dims) -> tuple[int, int]:
    """Which loops of a nest over ``dims`` OpenMP splits: (first, count), count 0 for none. Leading
    size-1 loops are skipped (a batch-1 NHWC tensor [1, 56, 56, 64] splits its H and W loops), then
    loops are collapsed until they run PARALLEL_CHUNKS iterations, never taking the innermost (the
    vector loop) unless it is the only one left."""
    first = next((d for d, n in enumerate(dims) if n > 1), None)
    if first is None:
        return 0, 0
    iterations, count = 1, 0
    for n in dims[first:max(len(dims) - 1, first + 1)]:
        iterations *= n
        count += 1
        if iterations >= PARALLEL_CHUNKS:
            break
    return first, count


def parallel_for_pragma(count: int) -> str:
    return "#pragma omp parallel for schedule(static)" + (f" collapse({count})" if count > 1 else "")


def inner_work(module: HloModule, inst: HloInstruction) -> int:
    """Rough work per output element: the largest reduction/contraction/window size inside ``inst``."""
    insts = (module.computation(inst.attr("calls").name).instructions if inst.opcode is Opcode.FUSION
             else (inst,))
    work = 1
    for i in insts:
        if i.opcode is Opcode.REDUCE:
            src = module_shape(module, inst, i, 0)
            work = max(work, math.prod(src.dims[d] for d in i.attr("dimensions")) if src else 1)
        elif i.opcode is Opcode.DOT:
            src = module_shape(module, inst, i, 0)
            work = max(work, math.prod(src.dims[d] for d in i.attr("lhs_contracting_dims", ())) if src else 1)
        elif i.opcode in (Opcode.CONVOLUTION, Opcode.REDUCE_WINDOW):
            work = max(work, math.prod(d.size for d in i.attr("window").dims) * 16)
    return work


def module_shape(module: HloModule, outer: HloInstruction, inst: HloInstruction, k: int):
    comp = module.computation(outer.attr("calls").name) if outer.opcode is Opcode.FUSION else None
    if comp is not None and inst.operands[k] in comp.by_name:
        shape = comp[inst.operands[k]].shape
        return shape if isinstance(shape, Shape) else None
    return None
