"""The row-program strategy: a run of row-wise instructions (softmax, layer norm) as one loop over rows.

The ``RowPrograms`` pass of the CPU pipeline (``row_programs.py``, over ``hlo/passes/row_programs.py``)
annotates each member of a group ``row_program=``; here the group becomes one loop nest over the rows
(the leading dims of its ``[..., K]`` arrays), split over the caller's threads like any nest
(``parallel.py``: contiguous blocks of rows, each row written by one thread). Per row, each member in
schedule order: a reduction or a ``[...]`` member is a scalar local; an ``[..., K]`` member is a loop
over the row's ``K`` columns, kept in a row array on the shard's stack (aligned, cache resident) when a
later member reads it, and stored only if it is used outside the group. So softmax reads its input row
twice from L1/L2 and writes its output once, instead of four passes over memory and two intermediates.

Reads of a group value must stay in the row (any column of a kept row is fine: it is complete when
the next member starts); otherwise ``CodegenUnsupported``, and the caller emits the members one by one.
"""

from __future__ import annotations

from backends.codegen.buffer import IndentedBuffer, c_comment, close_loops, open_loops
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.elemental_data import simple_reducer
from backends.codegen.errors import CodegenUnsupported
from backends.codegen.layout import linear_index
from backends.codegen.values import Buf
from backends.cpu.dialect import C
from backends.cpu.parallel import emit_nest, parallel_loops
from hlo.annotations import ROW_PROGRAM, RowRole
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


def _nan_tracked_reduce(em: ElementalEmitter, red: HloInstruction, rows: tuple[str, ...], k_len: int) -> None:
    """Emit ``red`` (a reduce of the row ``rows`` over its last dim) into ``em.buf`` with the loop of
    ``NAN_TRACKED`` when its reducer is one, and have ``em`` read its result there; else nothing."""
    ctype = em.dialect.compute(red.shape.dtype) if isinstance(red.shape, Shape) else None
    entry = NAN_TRACKED.get((simple_reducer(em.module, red.attr("to_apply").name), ctype))
    if entry is None or len(red.operands) != 2:
        return
    clause, cmp, helper = entry
    names = em.names
    init = em.emit(red.operands[1], ())
    acc, nan, r = names.fresh("acc"), names.fresh("nan"), names.fresh("r")
    em.buf.line(f"float {acc} = {C.reduction_identity(Opcode.MAXIMUM if clause == 'max' else Opcode.MINIMUM, 'float')};")
    em.buf.line(f"int32_t {nan} = 0;")
    em.buf.line(f"#pragma omp simd reduction({clause}:{acc}) reduction(|:{nan})")
    with em.buf.block(f"for (int64_t {r} = 0; {r} < {k_len}; ++{r})"):
        em.push()
        x = em.emit(red.operands[0], rows + (r,))
        em.buf.line(f"{acc} = {x} {cmp} {acc} ? {x} : {acc};")
        em.buf.line(f"{nan} |= {x} != {x};")
        em.pop()
    value = em.tmp("float", f"{helper}({init}, {nan} ? NAN : {acc})")
    em.external[red.name] = lambda idx, value=value: value


def emit_row_group(cem, group: list[HloInstruction]) -> None:
    """``group`` (members in schedule order) as one loop over rows into ``cem.buf``; the members used
    outside the group have their buffers in ``cem.values``, the others none."""
    comp, names = cem.comp, cem.names
    members = {m.name for m in group}
    users = comp.users()
    lead = _leading_dims(cem, group)
    k_len = group[0].attr(ROW_PROGRAM).cols
    mark = names.counter
    rows = tuple(names.fresh("i") for _ in lead)
    declared: dict[str, str] = {v: "int64_t" for v in rows}
    local: dict[str, object] = {}  # member -> its scalar ("s12") or its kept row (("row13",))
    body = IndentedBuffer()

    def reader(name: str):
        kept = local.get(name)
        if isinstance(kept, str):
            def read_scalar(idx, s=kept, name=name):
                if tuple(idx) != rows:
                    raise CodegenUnsupported(f"row program: %{name} read outside its row")
                return s
            return read_scalar
        if isinstance(kept, tuple):
            def read_row(idx, arr=kept[0], name=name):
                if tuple(idx[:-1]) != rows:
                    raise CodegenUnsupported(f"row program: %{name} read outside its row")
                return f"{arr}[{idx[-1]}]"
            return read_row
        if name in members:
            raise CodegenUnsupported(f"row program: %{name} is needed but not kept")
        return cem.reader(name)

    for inst in group:
        role = inst.attr(ROW_PROGRAM).role
        out = cem.values.get(inst.name)
        if out is not None and not isinstance(out, Buf):
            raise CodegenUnsupported(f"row program: %{inst.name} is not one array")
        readers = [reader(o) for o in inst.operands]
        if inst.opcode is Opcode.FUSION:
            fused = _body(cem, inst)
            em = ElementalEmitter(C, cem.gen.module, fused, readers, body, names, cem.gen.constant_ref,
                                  declared=declared)
            root = fused.root_name
        else:
            em = ElementalEmitter(C, cem.gen.module, comp, [], body, names, cem.gen.constant_ref,
                                  external=dict(zip(inst.operands, readers)), declared=declared)
            root = inst.name
        later = any(u in members for u in users.get(inst.name, []))
        body.line(c_comment(f"%{inst.name}: {role.value}{', written out' if out is not None else ''}"
                            f"{', kept' if later and role is RowRole.FULL else ''}", break_open=False))
        if role is RowRole.FULL:
            k = names.fresh("k")
            if later:
                local[inst.name] = (names.fresh("row"),)
                body.line(f"float {local[inst.name][0]}[{k_len}] __attribute__((aligned(64)));")
            open_loops(body, [(k, k_len)])
            em.push()
            value = em.emit(root, rows + (k,))
            if later:
                body.line(f"{local[inst.name][0]}[{k}] = {value};")
            if out is not None:
                body.line(f"{out.ptr}[{linear_index(out.shape, rows + (k,))}] = {C.store(out.shape.dtype, value)};")
            em.pop()
            close_loops(body, 1)
        else:
            if role is RowRole.REDUCE:
                _nan_tracked_reduce(em, em.comp[inst.attr(ROW_PROGRAM).reduce], rows, k_len)
            value = em.emit(root, rows)
            local[inst.name] = s = names.fresh("s")
            body.line(f"const float {s} = {value};")
            declared[s] = "float"
            if out is not None:
                body.line(f"{out.ptr}[{linear_index(out.shape, rows)}] = {C.store(out.shape.dtype, s)};")
    n_rows = 1
    for n in lead:
        n_rows *= n
    first, count = parallel_loops(lead + (k_len,))
    work = n_rows * k_len * len(group)
    split = first + count if count and work >= cem.gen.options.parallel_threshold else 0
    member_list = ", ".join(f"%{m.name}" for m in group)
    cem.buf.line(c_comment(f"row program over [{n_rows}, {k_len}]: {member_list}, one pass over each row",
                           break_open=False))
    with cem.buf.block(""):
        emit_nest(cem.buf, cem.outliner, list(zip(rows, lead)), split, body, declared, mark)
