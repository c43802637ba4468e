"""The row-program strategy: a run of row-wise instructions (softmax, layer norm) as one loop over rows.

The ``RowPrograms`` pass of the CPU pipeline (``row_programs.py``, over ``hlo/passes/row_programs.py``)
annotates each member of a group ``row_program=``; here the group becomes one loop nest over the rows
(the leading dims of its ``[..., K]`` arrays), split over the caller's threads like any nest
(``parallel.py``: contiguous blocks of rows, each row written by one thread). Per row, each member in
schedule order: a reduction or a ``[...]`` member is a scalar local; an ``[..., K]`` member is a loop
over the row's ``K`` columns, kept in a row array on the shard's stack (aligned, cache resident) when a
later member reads it, and stored only if it is used outside the group. A reduction right after an
``[..., K]`` member that reads it at the loop's column only accumulates in that member's loop. Row
reductions are written here (``_accumulation``): the reducer's vector clause, or for a float max/min the
plain vector max with NaN tracked apart (``NAN_TRACKED``). So softmax reads its input row twice (the
second time from L1) and writes its output once, instead of four passes over memory and two intermediates.
An ``exp(x - m)`` where ``m`` is the group's row max of ``x`` (softmax, log softmax) is the exp of a
non-positive argument (``tfxla_vexpf_nonpos``: bit-equal, a quarter fewer vector instructions).

Reads of a group value must stay in the row (any column of a kept row is fine: it is complete when
the next member starts); otherwise ``CodegenUnsupported``: the computation emitter tries each group
first (``row_group_fits``) and emits a group that cannot be one loop member by member, as if unannotated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from backends.codegen.buffer import IndentedBuffer, c_comment, close_loops, open_loops
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.elemental_data import simple_reducer
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.values import Buf
from backends.cpu.dialect import C
from backends.cpu.parallel import emit_nest, parallel_loops
from hlo.annotations import ROW_PROGRAM, RowRole
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape


def row_groups(comp: HloComputation) -> list[list[HloInstruction]]:
    """The row programs of ``comp`` as the pass annotated them, each with its members in schedule order."""
    groups: dict[int, list[HloInstruction]] = {}
    for inst in comp.instructions:
        rp = inst.attr(ROW_PROGRAM)
        if rp is not None:
            groups.setdefault(rp.group, []).append(inst)
    return list(groups.values())


def _body(cem, inst: HloInstruction) -> HloComputation:
    return cem.gen.module.computation(inst.attr("calls").name) if inst.opcode is Opcode.FUSION else cem.comp


def _leading_dims(cem, group: list[HloInstruction]) -> tuple[int, ...]:
    """The dims of a row index: those of the first reduction's source but its last."""
    first = group[0]
    body = _body(cem, first)
    src = body[body[first.attr(ROW_PROGRAM).reduce].operands[0]].shape
    assert isinstance(src, Shape)  # (the verifier checks the annotation)
    return src.dims[:-1]


# A float max/min reduction whose reducer is the NaN-keeping helper: the loop takes the plain vector
# max/min (one instruction, a short dependency chain) and tracks NaN apart; the helper then combines the
# initial value with the row's result (NaN if any element was). 2.5x faster than the helper per element.
NAN_TRACKED: dict[tuple[Opcode, str], tuple[str, str, str]] = {  # (reducer, type) -> (clause, compare, helper)
    (Opcode.MAXIMUM, "float"): ("max", ">", "tfxla_maxf"),
    (Opcode.MINIMUM, "float"): ("min", "<", "tfxla_minf"),
}


@dataclass
class _Accumulation:
    """A row reduction written by hand: its accumulators declared before the loop over the row, the
    loop's ``pragma``, ``update(x)`` per element (inside the loop) and ``finish()`` after it, which
    makes the emitter read the reduce's value from the result."""

    em: ElementalEmitter
    red: HloInstruction
    pragma: str
    update: Callable[[str], None]
    result: Callable[[], str]

    def finish(self) -> None:
        value = self.result()
        self.em.external[self.red.name] = lambda idx, value=value: value


def _accumulation(em: ElementalEmitter, red: HloInstruction) -> _Accumulation | None:
    """Declare the accumulators of ``red`` (a single-output reduce whose reducer has a vector clause) at
    the current point of ``em.buf``; None (nothing written) for any other reduce."""
    if len(red.operands) != 2 or not isinstance(red.shape, Shape):
        return None
    ctype = em.dialect.compute(red.shape.dtype)
    reducer = red.attr("to_apply").name
    op = simple_reducer(em.module, reducer)
    names, buf = em.names, em.buf
    tracked = NAN_TRACKED.get((op, ctype))
    if tracked is not None:
        clause, cmp, helper = tracked
        init = em.emit(red.operands[1], ())
        acc, nan = names.fresh("acc"), names.fresh("nan")
        buf.line(f"float {acc} = {C.reduction_identity(op, ctype)};")
        buf.line(f"int32_t {nan} = 0;")

        def update(x: str) -> None:
            em.buf.line(f"{acc} = {x} {cmp} {acc} ? {x} : {acc};")
            em.buf.line(f"{nan} |= {x} != {x};")

        return _Accumulation(em, red, f"#pragma omp simd reduction({clause}:{acc}) reduction(|:{nan})", update,
                             lambda: em.tmp(ctype, f"{helper}({init}, {nan} ? NAN : {acc})"))
    identity = C.reduction_identity(op, ctype) if op is not None else None
    if identity is None:
        return None
    init = em.emit(red.operands[1], ())
    acc = names.fresh("acc")
    buf.line(f"{ctype} {acc} = {identity};")

    def update_generic(x: str) -> None:
        em.buf.line(f"{acc} = {em.call_scalar(reducer, [acc, x])};")

    return _Accumulation(em, red, C.simd_pragma(C.reduction_clause(op, ctype, acc)), update_generic,
                         lambda: em.tmp(ctype, em.call_scalar(reducer, [init, acc])))


def _row_max_sources(cem, group: list[HloInstruction]) -> dict[str, str]:
    """Reduce member -> the array whose row max it is: a max reduction with no epilogue (its fusion's root)
    of an operand read as it is, so every element of that row is at most the member's value (or it is NaN)."""
    out = {}
    for m in group:
        rp = m.attr(ROW_PROGRAM)
        if rp.role is not RowRole.REDUCE:
            continue
        body = _body(cem, m)
        red = body[rp.reduce]
        if simple_reducer(cem.gen.module, red.attr("to_apply").name) is not Opcode.MAXIMUM:
            continue
        src = body[red.operands[0]]
        if m.opcode is not Opcode.FUSION:
            if m.name == red.name:
                out[m.name] = red.operands[0]
        elif body.root_name == red.name and src.opcode is Opcode.PARAMETER:
            out[m.name] = m.operands[src.parameter_number]
    return out


class _Group:
    """The emission of one group (see ``emit_row_group``)."""

    def __init__(self, cem, group: list[HloInstruction]):
        self.cem, self.group, self.names = cem, group, cem.names
        self.members = {m.name for m in group}
        self.users = cem.comp.users()
        self.lead = _leading_dims(cem, group)
        self.k_len = group[0].attr(ROW_PROGRAM).cols
        self.mark = self.names.counter
        self.rows = tuple(self.names.fresh("i") for _ in self.lead)
        self.declared: dict[str, str] = {v: "int64_t" for v in self.rows}
        self.local: dict[str, object] = {}  # member -> its scalar ("s12") or its kept row (("row13",))
        self.streaming: dict[str, tuple[str, str]] = {}  # member -> (column, value) inside its loop
        self.body = IndentedBuffer()
        self.row_max = _row_max_sources(cem, group)

    def reader(self, name: str) -> Callable:
        if name not in self.members:
            return self.cem.reader(name)
        rows = self.rows

        def read(idx, name=name):
            if name in self.streaming:
                k, value = self.streaming[name]
                if tuple(idx) != rows + (k,):
                    raise CodegenUnsupported(f"row program: %{name} read at another column in its loop")
                return value
            kept = self.local.get(name)
            if kept is None:
                raise CodegenUnsupported(f"row program: %{name} is needed but not kept")
            if isinstance(kept, str):
                if tuple(idx) != rows:
                    raise CodegenUnsupported(f"row program: %{name} read outside its row")
                return kept
            if tuple(idx[:-1]) != rows:
                raise CodegenUnsupported(f"row program: %{name} read outside its row")
            return f"{kept[0]}[{idx[-1]}]"
        return read

    def emitter(self, inst: HloInstruction, buf: IndentedBuffer) -> tuple[ElementalEmitter, str]:
        cem = self.cem
        readers = [self.reader(o) for o in inst.operands]
        if inst.opcode is Opcode.FUSION:
            fused = _body(cem, inst)
            return ElementalEmitter(C, cem.gen.module, fused, readers, buf, self.names, cem.gen.constant_ref,
                                    declared=self.declared), fused.root_name
        return ElementalEmitter(C, cem.gen.module, cem.comp, [], buf, self.names, cem.gen.constant_ref,
                                external=dict(zip(inst.operands, readers)), declared=self.declared), inst.name

    def out(self, inst: HloInstruction) -> Buf | None:
        out = self.cem.values.get(inst.name)
        if out is not None and not isinstance(out, Buf):
            raise CodegenUnsupported(f"row program: %{inst.name} is not one array")
        return out

    def later(self, inst: HloInstruction) -> bool:
        return any(u in self.members for u in self.users.get(inst.name, []))

    def comment(self, buf: IndentedBuffer, inst: HloInstruction, note: str = "") -> None:
        role = inst.attr(ROW_PROGRAM).role
        kept = self.later(inst) and role is RowRole.FULL
        buf.line(c_comment(f"%{inst.name}: {role.value}{', written out' if self.out(inst) is not None else ''}"
                           f"{', kept' if kept else ''}{note}", break_open=False))

    def nonpositive_exps(self, inst: HloInstruction, em: ElementalEmitter) -> None:
        """In member ``inst``'s fusion, each f32 ``exp(x - broadcast(m))`` over the row where ``m`` is a
        group member that is the row max of the same ``x`` (``_row_max_sources``: softmax, log softmax):
        its argument is <= 0 or NaN, so it is ``tfxla_vexpf_nonpos`` (``vmath.py``: bit-equal to
        ``tfxla_vexpf`` there, a quarter fewer vector instructions; the exp was 60% of softmax)."""
        if inst.opcode is not Opcode.FUSION:
            return
        comp, row = _body(self.cem, inst), self.lead + (self.k_len,)
        for e in comp.instructions:
            if e.opcode is not Opcode.EXPONENTIAL or not isinstance(e.shape, Shape) \
                    or e.shape.dtype is not PrimitiveType.F32 or e.shape.dims != row:
                continue
            sub = comp[e.operands[0]]
            if sub.opcode is not Opcode.SUBTRACT:
                continue
            x, b = comp[sub.operands[0]], comp[sub.operands[1]]
            if x.opcode is not Opcode.PARAMETER or b.opcode is not Opcode.BROADCAST \
                    or tuple(b.attr("dimensions")) != tuple(range(len(self.lead))):
                continue
            m = comp[b.operands[0]]
            if m.opcode is Opcode.PARAMETER and \
                    self.row_max.get(inst.operands[m.parameter_number]) == inst.operands[x.parameter_number]:
                em.external[e.name] = lambda idx, e=e: em.tmp(
                    "float", f"tfxla_vexpf_nonpos({em.operand(e, 0, idx)})")

    # --- members ----------------------------------------------------------------------------------
    def full(self, inst: HloInstruction, buf: IndentedBuffer, then: HloInstruction | None = None) -> None:
        """An ``[..., K]`` member's loop over the row; ``then``: a reduce member accumulated in the same
        loop (it reads this one at the loop's column only, else ``CodegenUnsupported``)."""
        em, root = self.emitter(inst, buf)
        out, later = self.out(inst), self.later(inst)
        k = self.names.fresh("k")
        self.nonpositive_exps(inst, em)
        kept_later = later and any(u in self.members and u != (then.name if then else None)
                                   for u in self.users.get(inst.name, []))
        if kept_later:
            self.local[inst.name] = (self.names.fresh("row"),)
            buf.line(f"float {self.local[inst.name][0]}[{self.k_len}] __attribute__((aligned(64)));")
        acc = None
        if then is not None:
            em2, root2 = self.emitter(then, buf)
            self.nonpositive_exps(then, em2)
            red = em2.comp[then.attr(ROW_PROGRAM).reduce]
            acc = _accumulation(em2, red)
            if acc is None:
                raise CodegenUnsupported(f"row program: %{then.name} has no vector reducer")
            buf.line(acc.pragma)
        open_loops(buf, [(k, self.k_len)])
        em.push()
        value = em.emit(root, self.rows + (k,))
        if kept_later:
            buf.line(f"{self.local[inst.name][0]}[{k}] = {value};")
        if out is not None:
            buf.line(f"{out.ptr}[{linear_index(out.shape, self.rows + (k,))}] = {C.store(out.shape.dtype, value)};")
        if acc is not None:
            self.streaming[inst.name] = (k, value)
            acc.em.push()
            acc.update(acc.em.emit(red.operands[0], self.rows + (k,)))
            acc.em.pop()
            del self.streaming[inst.name]
        em.pop()
        close_loops(buf, 1)
        if acc is not None:
            self.comment(buf, then, ", accumulated in the loop above")
            acc.finish()
            self.scalar_result(then, em2, root2, buf)

    def reduce_or_row(self, inst: HloInstruction) -> None:
        buf = self.body
        em, root = self.emitter(inst, buf)
        self.nonpositive_exps(inst, em)  # (log softmax's sum of exp(x - max))
        if inst.attr(ROW_PROGRAM).role is RowRole.REDUCE:
            red = em.comp[inst.attr(ROW_PROGRAM).reduce]
            acc = _accumulation(em, red)
            if acc is not None:
                r = self.names.fresh("r")
                buf.line(acc.pragma)
                with buf.block(f"for (int64_t {r} = 0; {r} < {self.k_len}; ++{r})"):
                    em.push()
                    acc.update(em.emit(red.operands[0], self.rows + (r,)))
                    em.pop()
                acc.finish()
        self.scalar_result(inst, em, root, buf)

    def scalar_result(self, inst: HloInstruction, em: ElementalEmitter, root: str, buf: IndentedBuffer) -> None:
        value = em.emit(root, self.rows)
        self.local[inst.name] = s = self.names.fresh("s")
        buf.line(f"const float {s} = {value};")
        self.declared[s] = "float"
        out = self.out(inst)
        if out is not None:
            buf.line(f"{out.ptr}[{linear_index(out.shape, self.rows)}] = {C.store(out.shape.dtype, s)};")

    def emit_members(self) -> None:
        group, j = self.group, 0
        while j < len(group):
            inst = group[j]
            nxt = group[j + 1] if j + 1 < len(group) else None
            self.comment(self.body, inst)
            if inst.attr(ROW_PROGRAM).role is not RowRole.FULL:
                self.reduce_or_row(inst)
                j += 1
                continue
            if nxt is not None and nxt.attr(ROW_PROGRAM).role is RowRole.REDUCE:
                trial = IndentedBuffer()
                try:
                    self.full(inst, trial, then=nxt)
                except CodegenUnsupported:
                    self.streaming.clear()
                    self.local.pop(inst.name, None)
                    self.local.pop(nxt.name, None)
                else:
                    self.body.splice(trial)
                    j += 2
                    continue
            self.full(inst, self.body)
            j += 1


def emit_row_group(cem, group: list[HloInstruction]) -> None:
    """``group`` (members in schedule order) as one loop over rows into ``cem.buf``; the members used
    outside the group have their buffers in ``cem.values``, the others none. A reduction that follows
    an ``[..., K]`` member is accumulated in that member's loop when it reads it at the loop's column
    only (softmax's sum of the exponentials: no second pass over the kept row)."""
    g = _Group(cem, group)
    g.emit_members()
    n_rows = math.prod(g.lead)
    first, count = parallel_loops(g.lead + (g.k_len,))
    work = n_rows * g.k_len * len(group)
    split = first + count if count and work >= cem.gen.options.parallel_threshold else 0
    member_list = ", ".join(f"%{m.name}" for m in group)
    cem.buf.line(c_comment(f"row program over [{n_rows}, {g.k_len}]: {member_list}, one pass over each row",
                           break_open=False))
    with cem.buf.block(""):
        emit_nest(cem.buf, cem.outliner, list(zip(g.rows, g.lead)), split, g.body, g.declared, g.mark)
