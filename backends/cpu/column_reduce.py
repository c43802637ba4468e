"""The column-reduction strategy: reduce the leading dims of an array by streaming it once.

The generic loop nest computes each output element with an inner loop over
the reduced dims; when those are the leading (outer) dims, that inner loop
strides through memory and touches every cache line many times. Here the
loops are interchanged instead: the output is set to the init value, then
the input is walked in memory order, each row combined into the output with
the reducer (the innermost loop runs over the kept dims, contiguous and
vectorizable). Used for single-output reductions whose reducer is one
binary op, whose compute type is their storage type, and whose reduced dims
are exactly the leading dims of a row-major input: the reduces the
``ColumnReductions`` pass (``column_reductions.py``) annotated ``column_reduce=true``.
"""

from __future__ import annotations

from backends.codegen.elemental import ElementalEmitter
from backends.codegen.layout import linear_index
from backends.cpu.dialect import C
from hlo.annotations import COLUMN_REDUCE
from hlo.ir import HloInstruction
from hlo.shapes import Layout, Shape


def column_reduce(em: ElementalEmitter, root: HloInstruction, out, buf, names) -> bool:
    """Emit ``root`` into buffer ``out`` with the interchanged loops when the pipeline annotated it
    ``column_reduce=true`` (``column_reductions.py``) and ``out`` is row-major; False otherwise."""
    if root.attr(COLUMN_REDUCE) is not True or out.shape.layout not in (None, Layout.default(out.shape.rank)):
        return False
    src, shape = em.comp[root.operands[0]].shape, root.shape
    if not isinstance(src, Shape) or not isinstance(shape, Shape):  # (the verifier's check of the annotation)
        return False
    dims = sorted(root.attr("dimensions"))
    dtype = shape.dtype
    kept = src.dims[len(dims):]
    rvars = [names.fresh("r") for _ in dims]
    jvars = [names.fresh("j") for _ in kept]
    n_out = out.shape.num_elements
    buf.line("/* column reduction: the input is streamed once, row by row, into the output */")
    init = em.emit(root.operands[1], ())
    buf.line(f"for (int64_t j = 0; j < {n_out}; ++j) {out.ptr}[j] = {init};")
    for var, n in zip(rvars, (src.dims[d] for d in dims)):
        buf.line(f"for (int64_t {var} = 0; {var} < {n}; ++{var}) {{")
        buf._level += 1
    for k, (var, n) in enumerate(zip(jvars, kept)):
        if k == len(jvars) - 1:
            buf.line("#pragma omp simd")
        buf.line(f"for (int64_t {var} = 0; {var} < {n}; ++{var}) {{")
        buf._level += 1
    em.push()
    value = em.emit(root.operands[0], tuple(rvars + jvars))
    slot = f"{out.ptr}[{linear_index(out.shape, tuple(jvars))}]"
    acc = em.tmp(C.compute(dtype), slot, "c")
    new = em.call_scalar(root.attr("to_apply").name, [acc, value])
    buf.line(f"{slot} = {new};")
    em.pop()
    for _ in rvars + jvars:
        buf._level -= 1
        buf.line("}")
    return True
