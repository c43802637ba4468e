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

Two places take them (``computation.py``'s loops):

* ``column_reduce``: the reduce is what the loop computes (a fusion's root, or an unfused reduce); it is
  streamed straight into the output buffer.
* ``column_members``: reduces inside a fused computation whose root is something else (a bias gradient
  fused with the optimizer's update, BatchNorm's mean/variance or its gradients' sums, in a multi-output
  fusion). Each is streamed first into a local array of its result (at most ``MEMBER_ELEMENTS``, and
  ``FUSION_MEMBER_ELEMENTS`` for all of a fusion's: the pass annotates no more), then
  the fusion's loop reads it from there (``ElementalEmitter.external``) instead of recomputing it per
  element. Consecutive members over inputs of the same dims (their leading dims reduced alike, one
  compute type, none reading another) share one pass: one walk over the rows, every member's operand
  computed at each element (the sum of dy and the sum of dy*x of a BatchNorm gradient).

A pass with enough work (rows x kept elements >= the code generator's ``parallel_threshold``) runs its
rows as a fixed number of parts (from the sizes only: ``column_parts``), each accumulating every kept
element from the reducer's identity into its own partials in the shard context (``Outliner.call``'s
``part``); the partials are then combined in order onto the init value with the reducer, so the results
do not depend on the number of threads (docs/design.md §7).
"""

from __future__ import annotations

import math
from typing import Sequence

from backends.codegen.buffer import IndentedBuffer, close_loops, open_loops
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.elemental_data import simple_reducer
from backends.codegen.layout import linear_index
from backends.cpu.dialect import C
from backends.cpu.parallel import REDUCTION_PARTS, Outliner, decode
from hlo.annotations import COLUMN_REDUCE
from hlo.ir import HloInstruction
from hlo.shapes import Layout, Shape

MEMBER_ELEMENTS = 16384  # result elements of a member reduce, held in a local array (stack)
FUSION_MEMBER_ELEMENTS = 65536  # result elements of all the members of one fusion
PART_ELEMENTS = 16384  # partials of one parallel pass (parts x members x result elements), in its context
PART_ROWS = 8  # rows of a part, at least
PART_MIN = 8192  # input elements of a part, at least

STREAM_COMMENT = "/* column reduction: the input is streamed once, row by row, into the output */"


def _row_major(shape) -> bool:
    return isinstance(shape, Shape) and shape.layout in (None, Layout.default(shape.rank))


def _taken(em: ElementalEmitter, inst: HloInstruction) -> bool:
    """``inst`` is an annotated column reduce of a row-major input into a row-major result."""
    return (inst.attr(COLUMN_REDUCE) is True and _row_major(inst.shape)
            and _row_major(em.comp[inst.operands[0]].shape))  # (the verifier's check of the annotation)


def column_parts(rows: int, kept: int, members: int, threshold: int) -> int:
    """How many parts the rows of a pass run in (1: serial): from the sizes only, never the thread count.
    A part gets at least ``PART_ROWS`` rows and ``PART_MIN`` elements (it also sets and hands back its
    partials), and the partials of all parts fit ``PART_ELEMENTS``."""
    if rows * kept * members < threshold:
        return 1
    parts = min(REDUCTION_PARTS, rows // PART_ROWS, rows * kept // PART_MIN, PART_ELEMENTS // (kept * members))
    return parts if parts >= 2 else 1


class ColumnPass:
    """One walk over the rows of inputs of one shape, reducing each of ``reduces`` into ``dests`` (C arrays
    of their row-major results)."""

    def __init__(self, em: ElementalEmitter, buf: IndentedBuffer, names, outliner: Outliner | None,
                 threshold: int, reduces: Sequence[HloInstruction], dests: Sequence[str]):
        self.em, self.buf, self.names, self.outliner = em, buf, names, outliner
        self.reduces, self.dests = list(reduces), list(dests)
        src = em.comp[self.reduces[0].operands[0]].shape
        self.k = len(self.reduces[0].attr("dimensions"))
        self.rows, self.kept = list(src.dims[:self.k]), list(src.dims[self.k:])
        self.shape = Shape(self.reduces[0].shape.dtype, tuple(self.kept))
        self.ctype = C.compute(self.shape.dtype)
        self.n = math.prod(self.kept)
        self.threshold = threshold

    def _body(self, rvars: list[str], jvars: list[str], slots: list[str]) -> IndentedBuffer:
        """The statements at one element (row ``rvars``, kept ``jvars``): each member's operand combined
        into its slot."""
        em = self.em
        with self.buf.capture() as body:
            em.push()
            for red, slot in zip(self.reduces, slots):
                value = em.emit(red.operands[0], tuple(rvars + jvars))
                acc = em.tmp(self.ctype, slot, "c")
                self.buf.line(f"{slot} = {em.call_scalar(red.attr('to_apply').name, [acc, value])};")
            em.pop()
        return body

    def emit(self) -> None:
        em, buf = self.em, self.buf
        buf.line(STREAM_COMMENT)
        inits = [em.emit(red.operands[1], ()) for red in self.reduces]
        parts = column_parts(math.prod(self.rows), self.n, len(self.reduces), self.threshold)
        if parts > 1 and self.outliner is not None and self._parallel(parts, inits):
            return
        for dest, init in zip(self.dests, inits):
            buf.line(f"for (int64_t j = 0; j < {self.n}; ++j) {dest}[j] = {init};")
        rvars = [self.names.fresh("r") for _ in self.rows]
        jvars = [self.names.fresh("j") for _ in self.kept]
        lin = linear_index(self.shape, tuple(jvars))
        body = self._body(rvars, jvars, [f"{dest}[{lin}]" for dest in self.dests])
        loops = list(zip(rvars + jvars, self.rows + self.kept))
        open_loops(buf, loops, {len(loops) - 1: "#pragma omp simd"})
        buf.splice(body)
        close_loops(buf, len(loops))

    def _parallel(self, parts: int, inits: list[str]) -> bool:
        """The pass in ``parts`` tasks (``column_parts``), partials combined in order after the call;
        False (nothing written) when a reducer has no identity or the body reads a local the shard cannot
        receive."""
        em, buf, names = self.em, self.buf, self.names
        ops = [simple_reducer(em.module, red.attr("to_apply").name) for red in self.reduces]
        identities = [C.reduction_identity(op, self.ctype) if op is not None else None for op in ops]
        if any(i is None for i in identities):
            return False
        mark = names.counter
        width = self.n * len(self.reduces)
        part = names.fresh("part")
        rvars = [names.fresh("r") for _ in self.rows]
        jvars = [names.fresh("j") for _ in self.kept]
        lin = linear_index(self.shape, tuple(jvars))
        slots = [f"{part}[{g * self.n} + {lin}]" if g else f"{part}[{lin}]" for g in range(len(self.reduces))]
        body = self._body(rvars, jvars, slots)
        captures = self.outliner.captures(body.getvalue(), em.declared, mark, set(rvars + jvars))
        if captures is None:
            return False
        rows = list(zip(rvars, self.rows))
        m, q = 0, 1  # the leading row loops collapsed into at least ``parts`` iterations, cut into ranges
        while q < parts:
            q *= self.rows[m]
            m += 1
        shard = IndentedBuffer()
        with shard.block("for (int64_t t_ = begin_; t_ < end_; ++t_)"):
            shard.line(f"{self.ctype} {part}[{width}];  /* this task's partials (its own cache lines) */")
            for g, ident in enumerate(identities):
                at = f"{g * self.n} + j" if g else "j"
                shard.line(f"for (int64_t j = 0; j < {self.n}; ++j) {part}[{at}] = {ident};")
            with shard.block(f"for (int64_t f_ = t_ * {q} / {parts}; f_ < (t_ + 1) * {q} / {parts}; ++f_)"):
                decode(shard, "f_", rows[:m])
                loops = rows[m:] + list(zip(jvars, self.kept))
                open_loops(shard, loops, {len(loops) - 1: "#pragma omp simd"})
                shard.splice(body)
                close_loops(shard, len(loops))
            shard.line(f"for (int64_t j = 0; j < {width}; ++j) c_->part[t_ * {width} + j] = {part}[j];")
        with buf.block(""):
            self.outliner.call(buf, parts, shard, captures, (self.ctype, parts * width))
            with buf.block(f"for (int64_t j = 0; j < {self.n}; ++j)"):
                em.push()
                for g, (red, dest, init) in enumerate(zip(self.reduces, self.dests, inits)):
                    acc = em.var(self.ctype, init, "acc")
                    at = f"t_ * {width} + {g * self.n} + j" if g else f"t_ * {width} + j"
                    with buf.block(f"for (int64_t t_ = 0; t_ < {parts}; ++t_)"):
                        new = em.call_scalar(red.attr("to_apply").name, [acc, f"ctx_.part[{at}]"])
                        buf.line(f"{acc} = {new};")
                    buf.line(f"{dest}[j] = {acc};")
                em.pop()
        return True


def column_reduce(em: ElementalEmitter, root: HloInstruction, out, buf, names, outliner: Outliner | None = None,
                  threshold: int = 1 << 62) -> bool:
    """Emit ``root`` into buffer ``out`` with the interchanged loops when the pipeline annotated it
    ``column_reduce=true`` (``column_reductions.py``) and ``out`` is row-major; False otherwise. With an
    ``outliner``, a pass of ``threshold`` work or more runs its rows in parts on the caller's threads."""
    if not _taken(em, root) or not _row_major(out.shape):
        return False
    ColumnPass(em, buf, names, outliner, threshold, [root], [out.ptr]).emit()
    return True


def _reads(em: ElementalEmitter, name: str, targets: set[str]) -> bool:
    """Whether ``name`` (an instruction of ``em.comp``) depends on one of ``targets``."""
    seen, todo = set(), list(em.comp[name].operands)
    while todo:
        o = todo.pop()
        if o in targets:
            return True
        if o not in seen:
            seen.add(o)
            todo.extend(em.comp[o].operands)
    return False


def _pass_key(em: ElementalEmitter, red: HloInstruction) -> tuple:
    """Reduces of one key can share a pass: input dims, how many leading dims reduced, compute type."""
    return em.comp[red.operands[0]].shape.dims, len(red.attr("dimensions")), C.compute(red.shape.dtype)


def column_members(em: ElementalEmitter, buf: IndentedBuffer, names, outliner: Outliner | None,
                   threshold: int) -> frozenset[str]:
    """Stream the annotated column reduces of ``em.comp`` other than its root into local arrays (grouped in
    passes), and make ``em`` read them from there; returns their names."""
    members = [i for i in em.comp.instructions
               if i.name != em.comp.root_name and _taken(em, i)]
    groups: list[list[HloInstruction]] = []
    for red in members:
        last = groups[-1] if groups else None
        if (last is not None and _pass_key(em, red) == _pass_key(em, last[0])
                and not _reads(em, red.name, {r.name for r in last})
                and red.shape.num_elements * (len(last) + 1) * 2 <= PART_ELEMENTS):
            last.append(red)
        else:
            groups.append([red])
    for group in groups:
        arrays = []
        for red in group:
            array = names.fresh("col")
            buf.line(f"{C.compute(red.shape.dtype)} {array}[{red.shape.num_elements}];")
            em.declared[array] = f"{C.compute(red.shape.dtype)}*"  # passed to shards as a pointer
            arrays.append(array)
        ColumnPass(em, buf, names, outliner, threshold, group, arrays).emit()
        for red, array in zip(group, arrays):
            em.external[red.name] = lambda idx, a=array, s=red.shape: f"{a}[{linear_index(s, idx)}]"
    return frozenset(r.name for r in members)
